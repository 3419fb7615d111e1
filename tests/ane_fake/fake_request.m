// Fake _ANERequest (with the -validate limits of C42), _ANEIOSurfaceObject (retains its surface) and
// _ANEDeviceInfo (an ANE of the generation named by ORION_ANE_FAKE_CHIP; ORION_ANE_FAKE_NO_ANE=1 makes
// +hasANE answer NO, to test the "no Neural Engine" path; ORION_ANE_FAKE_DEVICE_INFO=odd makes the
// optional getters misbehave, as a real Mac might: +hasANE missing, +aneSubType raising, +aneArchitectureType
// answering an NSNumber, +numANECores declaring a double return type).
#import "fake_contract.h"

#include <stdlib.h>
#include <string.h>

@implementation _ANEIOSurfaceObject
+ (id)objectWithIOSurface:(IOSurfaceRef)s {
  if (!s) return nil;
  if (!orion_iosurface_is_alive(s)) fake_violation(YES, @"+objectWithIOSurface: with a released IOSurface");
  _ANEIOSurfaceObject* o = [[[self alloc] init] autorelease];
  o->surface = (IOSurfaceRef)CFRetain(s);
  g_fake.surface_objects++;
  return o;
}
- (void)dealloc {
  CFRelease(surface);
  [super dealloc];
}
- (IOSurfaceRef)ioSurface { return surface; }
@end

@implementation _ANERequest
+ (id)requestWithInputs:(NSArray*)ins
           inputIndices:(NSArray*)iidx
                outputs:(NSArray*)outs
          outputIndices:(NSArray*)oidx
          weightsBuffer:(id)wb
              perfStats:(id)ps
         procedureIndex:(NSNumber*)proc {
  if (wb) fake_violation(NO, @"request with a weightsBuffer: the hardware ignores it (C43)");
  if (ps) fake_violation(NO, @"request with perfStats: pass nil");
  if (![proc isKindOfClass:[NSNumber class]]) fake_violation(YES, @"procedureIndex is %@, not an NSNumber", proc);
  _ANERequest* r = [[[self alloc] init] autorelease];
  r->inputs = [ins retain];
  r->inputIndices = [iidx retain];
  r->outputs = [outs retain];
  r->outputIndices = [oidx retain];
  r->weightsBuffer = [wb retain];
  r->perfStats = [ps retain];
  r->procedureIndex = [proc retain];
  r->serial = ++g_fake.requests_created;
  return r;
}
- (void)dealloc {
  [inputs release];
  [inputIndices release];
  [outputs release];
  [outputIndices release];
  [weightsBuffer release];
  [perfStats release];
  [procedureIndex release];
  [super dealloc];
}
// C42 (decompiled limits).
- (BOOL)validate {
  NSUInteger ni = [inputs count], no = [outputs count];
  if (!ni || !no || ni != [inputIndices count] || no != [outputIndices count] || ni > 255 || no > 255) return NO;
  for (NSArray* idx in [NSArray arrayWithObjects:inputIndices, outputIndices, nil])
    for (NSNumber* n in idx)
      if (![n isKindOfClass:[NSNumber class]] || [n unsignedIntegerValue] > 254) return NO;
  return [procedureIndex unsignedIntegerValue] <= 128;
}
@end

@interface _ANEDeviceInfo : NSObject
@end

static const char* chip(void) {
  const char* c = getenv("ORION_ANE_FAKE_CHIP");
  return c && *c ? c : "m4";
}

static BOOL odd(void) {
  const char* o = getenv("ORION_ANE_FAKE_DEVICE_INFO");
  return o && !strcmp(o, "odd");
}

@implementation _ANEDeviceInfo
+ (BOOL)respondsToSelector:(SEL)s {
  if (odd() && sel_isEqual(s, @selector(hasANE))) return NO;
  return [super respondsToSelector:s];
}
+ (NSMethodSignature*)methodSignatureForSelector:(SEL)s {
  if (odd() && sel_isEqual(s, @selector(numANECores))) return [NSMethodSignature signatureWithObjCTypes:"d@:"];
  return [super methodSignatureForSelector:s];
}
+ (BOOL)hasANE {
  const char* no = getenv("ORION_ANE_FAKE_NO_ANE");
  return !(no && *no && strcmp(no, "0") != 0);
}
+ (unsigned int)numANEs { return 1; }
+ (unsigned int)numANECores { return 16; }
+ (NSString*)aneSubType {
  if (odd()) [NSException raise:@"NSInternalInconsistencyException" format:@"fake: aneSubType is unavailable"];
  static const char* names[] = {"m1", "h13", "m2", "h14", "m3", "h15", "m4", "h16", "m5", "h17"};
  for (int i = 0; i < 10; i += 2)
    if (!strcmp(chip(), names[i])) return [NSString stringWithUTF8String:names[i + 1]];
  return @"h16";
}
+ (NSString*)aneArchitectureType {
  if (odd()) return (NSString*)[NSNumber numberWithInt:16];
  return [[self aneSubType] stringByAppendingString:@"g"];
}
+ (NSString*)aneSubTypeVariant { return @"g"; }
+ (NSString*)aneSubTypeProductVariant { return @""; }
+ (long long)aneBoardType { return 192; }
+ (NSString*)productName { return @"macOS"; }
+ (NSString*)buildVersion { return @"FAKE0"; }
+ (BOOL)isVirtualMachine { return NO; }
// +aneSubTypeAndVariant is deliberately absent (optional: newer framework builds only).
@end
