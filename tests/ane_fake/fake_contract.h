// Shared state of the fake AppleNeuralEngine: the contract-violation log, counters, the emulated
// daemon's compiled-program cache (keyed by identifier, like aned: C07) and the per-process compile
// budget (C05). A violation is printed, recorded (tests read the log through ane_fake_report()) and
// raised as an NSException from the offending call, so a backend bug fails loudly.
#pragma once
#import <Foundation/Foundation.h>

#include "IOSurface/IOSurface.h"
#include "fake_sim.h"

// Records a violation and raises NSException "OrionANEFakeContractViolation" (unless in dealloc).
void fake_violation(BOOL raise, NSString* format, ...);

typedef struct {
  long descriptors, models_created, models_alive, compiles, hidden_compiles, loads, unloads, evals,
      requests_created, surface_objects, budget;
  // What a real Mac might do that working code copes with (ane_fake_set): identifiers of another shape (1: lower-case
  // hex with '-' separators, 2: an unsafe "../..." name), unloads that do their work but answer NO.
  long id_style, unload_no;
} FakeCounters;
extern FakeCounters g_fake;
// The weight entry shape of the last descriptor ("data:NSData 8256 B, offset:NSNumber 0", keys in
// enumeration order; "" when weight-free), for ane_fake_report.
void fake_note_entry(NSString* shape);

// Holds one compiled program (aned's cache entry).
@interface OrionFakeCompiled : NSObject {
 @public
  FakeProgram* program;
}
@end

NSString* fake_folder(NSString* hexId);  // NSTemporaryDirectory()/<hexId>
// The daemon's cache.
OrionFakeCompiled* fake_cached(NSString* hexId);
// Compiles from the folder's net.plist + weight files (what aned reads); counts it against the
// budget (a compile past the budget fails silently: NO with no NSError, as reported upstream).
OrionFakeCompiled* fake_compile_folder(NSString* hexId, BOOL hidden, NSError** error);
void fake_check_qos(unsigned int qos, const char* selector);
void fake_check_options(NSDictionary* options, const char* selector);
NSError* fake_error(NSString* domain, long code, NSString* description);
// Evaluates a request (validate, surface size rules, simulator). Returns NO with *error set (or left
// nil when -validate fails, as the framework does). load_mark: the request serial at the model's last
// load; a request built before it is a violation (working probe code rebuilds requests after a reload).
BOOL fake_evaluate(OrionFakeCompiled* compiled, id request, long load_mark, NSError** error);
long fake_request_serial(void);  // serial of the last request created

@interface _ANEIOSurfaceObject : NSObject {
 @public
  IOSurfaceRef surface;
}
+ (id)objectWithIOSurface:(IOSurfaceRef)surface;
- (IOSurfaceRef)ioSurface;
@end

@interface _ANERequest : NSObject {
 @public
  NSArray *inputs, *inputIndices, *outputs, *outputIndices;
  id weightsBuffer, perfStats;
  NSNumber* procedureIndex;
  long serial;
}
- (BOOL)validate;
@end
