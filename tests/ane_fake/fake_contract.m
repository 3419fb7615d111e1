// See fake_contract.h.
#import "fake_contract.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

FakeCounters g_fake = {0};
static NSMutableArray* g_violations;
static NSMutableDictionary* g_cache;  // hexId -> OrionFakeCompiled
static NSObject* g_lock;
static NSString* g_last_entry;

// Lazily (not in a constructor: this file's selectors are registered by the Objective-C runtime's
// own load function, which may run after a constructor of the same file).
static void fake_init_once(void) {
  g_violations = [[NSMutableArray alloc] init];
  g_cache = [[NSMutableDictionary alloc] init];
  g_lock = [[NSObject alloc] init];
  const char* b = getenv("ORION_ANE_FAKE_BUDGET");
  g_fake.budget = b && *b ? atol(b) : 119;
  const char* style = getenv("ORION_ANE_FAKE_ID_STYLE");  // as ane_fake_set("id_style"), for subprocesses
  g_fake.id_style = style && *style ? atol(style) : 0;
}

static void fake_init(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, fake_init_once);
}

void fake_violation(BOOL raise, NSString* format, ...) {
  fake_init();
  va_list ap;
  va_start(ap, format);
  NSString* m = [[[NSString alloc] initWithFormat:format arguments:ap] autorelease];
  va_end(ap);
  @synchronized(g_lock) { [g_violations addObject:m]; }
  fprintf(stderr, "ANE FAKE CONTRACT VIOLATION: %s\n", [m UTF8String]);
  if (getenv("ORION_ANE_FAKE_ABORT")) abort();
  if (raise) [NSException raise:@"OrionANEFakeContractViolation" format:@"ANE fake contract violation: %@", m];
}

@implementation OrionFakeCompiled
- (void)dealloc {
  fake_program_free(program);
  [super dealloc];
}
@end

NSString* fake_folder(NSString* hexId) { return [NSTemporaryDirectory() stringByAppendingPathComponent:hexId]; }

OrionFakeCompiled* fake_cached(NSString* hexId) {
  fake_init();
  @synchronized(g_lock) { return [[[g_cache objectForKey:hexId] retain] autorelease]; }
}

NSError* fake_error(NSString* domain, long code, NSString* description) {
  NSDictionary* info = [NSDictionary dictionaryWithObject:description forKey:NSLocalizedDescriptionKey];
  return [NSError errorWithDomain:domain code:code userInfo:info];
}

OrionFakeCompiled* fake_compile_folder(NSString* hexId, BOOL hidden, NSError** error) {
  fake_init();
  if (g_fake.compiles + g_fake.hidden_compiles >= g_fake.budget) return nil;  // silent, as reported (C05)
  NSString* dir = fake_folder(hexId);
  NSData* text = [NSData dataWithContentsOfFile:[dir stringByAppendingPathComponent:@"net.plist"]];
  if (!text) {
    if (error) *error = fake_error(@"com.apple.appleneuralengine", 2, [NSString stringWithFormat:@"no net.plist in %@", dir]);
    return nil;
  }
  char err[2048] = {0};
  FakeProgram* p = fake_compile((const char*)[text bytes], [text length], [dir fileSystemRepresentation], err, sizeof err);
  if (!p) {
    if (error)
      *error = fake_error(@"com.apple.appleneuralengine.compiler", 1,
                          [NSString stringWithFormat:@"ANECCompile() FAILED: err=(CompilationFailure) %s", err]);
    return nil;
  }
  OrionFakeCompiled* c = [[[OrionFakeCompiled alloc] init] autorelease];
  c->program = p;
  @synchronized(g_lock) {
    [g_cache setObject:c forKey:hexId];
    if (hidden) g_fake.hidden_compiles++;
    else g_fake.compiles++;
  }
  return c;
}

void fake_check_qos(unsigned int qos, const char* selector) {
  if (qos != 21) fake_violation(YES, @"%s called with QoS %u; the backend must pass 21 (QOS_CLASS_DEFAULT)", selector, qos);
}

void fake_check_options(NSDictionary* options, const char* selector) {
  if (!options)
    fake_violation(YES, @"%s called with nil options: the framework would drop its MIL/identifier keys; pass @{}", selector);
  else if (![options isKindOfClass:[NSDictionary class]])
    fake_violation(YES, @"%s options is not an NSDictionary", selector);
}

static BOOL surface_sizes(NSArray* objs, const char* dir, size_t* size, NSMutableString* why) {
  *size = 0;
  for (NSUInteger i = 0; i < [objs count]; ++i) {
    _ANEIOSurfaceObject* o = [objs objectAtIndex:i];
    if (![o isKindOfClass:[_ANEIOSurfaceObject class]]) {
      fake_violation(YES, @"%s %lu of the request is a %@, not an _ANEIOSurfaceObject", dir, (unsigned long)i, [o class]);
    }
    if (!orion_iosurface_is_alive(o->surface)) fake_violation(YES, @"%s surface %lu was released", dir, (unsigned long)i);
    size_t s = IOSurfaceGetAllocSize(o->surface);
    if (s < 49152) [why appendFormat:@"%s surface %lu is %zu bytes (< 49,152, C04); ", dir, (unsigned long)i, s];
    if (i && s != *size) [why appendFormat:@"%s surfaces differ in alloc size (%zu vs %zu, C02/C12); ", dir, *size, s];
    if (!i) *size = s;
  }
  return [why length] == 0;
}

// Orders buffers by their symbol index (what the index arrays say).
static void ordered(NSArray* objs, NSArray* idx, void** bases, size_t* sizes) {
  for (NSUInteger i = 0; i < [objs count]; ++i) {
    NSUInteger slot = [[idx objectAtIndex:i] unsignedIntegerValue];
    _ANEIOSurfaceObject* o = [objs objectAtIndex:i];
    bases[slot] = orion_iosurface_device_base(o->surface);  // the device: the CPU must have unlocked it
    sizes[slot] = IOSurfaceGetAllocSize(o->surface);
  }
}

void fake_note_entry(NSString* shape) {
  fake_init();
  @synchronized(g_lock) {
    [g_last_entry release];
    g_last_entry = [shape copy];
  }
}

long fake_request_serial(void) { return g_fake.requests_created; }

BOOL fake_evaluate(OrionFakeCompiled* compiled, id request, long load_mark, NSError** error) {
  fake_init();
  if (![request isKindOfClass:[_ANERequest class]]) fake_violation(YES, @"evaluate: request is a %@", [request class]);
  _ANERequest* r = request;
  if (r->serial <= load_mark)
    fake_violation(NO, @"evaluate with an _ANERequest built before the model's last load (working probe code builds a "
                       @"new request after every reload)");
  if (![r validate]) {
    fake_violation(NO, @"evaluate: the request fails -validate (C42); the backend should have rejected it first");
    return NO;  // error left nil, as the framework does
  }
  NSMutableString* why = [NSMutableString string];
  size_t in_size, out_size;
  BOOL ok = surface_sizes(r->inputs, "input", &in_size, why);
  ok = surface_sizes(r->outputs, "output", &out_size, why) && ok;
  int nin = (int)[r->inputs count], nout = (int)[r->outputs count];
  if (ok && (nin != fake_num_inputs(compiled->program) || nout != fake_num_outputs(compiled->program)))
    [why appendFormat:@"the program has %d inputs and %d outputs, the request binds %d and %d",
                      fake_num_inputs(compiled->program), fake_num_outputs(compiled->program), nin, nout];
  for (NSArray* idx in [NSArray arrayWithObjects:r->inputIndices, r->outputIndices, nil])
    for (NSUInteger i = 0; i < [idx count]; ++i)
      if ([[idx objectAtIndex:i] unsignedIntegerValue] >= [idx count]) [why appendFormat:@"symbol index %@ out of range; ", [idx objectAtIndex:i]];
  if ([why length]) {
    fake_violation(NO, @"evaluate with surfaces the hardware rejects (status 0x1d): %@", why);
    if (error) *error = fake_error(@"com.apple.appleneuralengine", 8, [NSString stringWithFormat:@"Program Inference error: %@", why]);
    return NO;
  }
  void* ins[256];
  void* outs[256];
  size_t in_sizes[256], out_sizes[256];
  ordered(r->inputs, r->inputIndices, ins, in_sizes);
  ordered(r->outputs, r->outputIndices, outs, out_sizes);
  char err[2048] = {0};
  int status = fake_eval(compiled->program, ins, in_sizes, nin, outs, out_sizes, nout, err, sizeof err);
  for (NSUInteger i = 0; i < [r->outputs count]; ++i)
    orion_iosurface_device_wrote(((_ANEIOSurfaceObject*)[r->outputs objectAtIndex:i])->surface);
  @synchronized(g_lock) { g_fake.evals++; }
  if (status) {
    if (error)
      *error = fake_error(@"com.apple.appleneuralengine", status == 0x1d ? 8 : status,
                          [NSString stringWithFormat:@"Program Inference error: %s", err]);
    return NO;
  }
  return YES;
}

// ---- test hooks (ctypes) ------------------------------------------------------------------------

static NSString* json_string(NSString* s) {
  NSMutableString* o = [NSMutableString stringWithString:@"\""];
  for (NSUInteger i = 0; i < [s length]; ++i) {
    unichar c = [s characterAtIndex:i];
    if (c == '"' || c == '\\') [o appendFormat:@"\\%C", c];
    else if (c < 0x20) [o appendFormat:@"\\u%04x", (unsigned)c];
    else [o appendFormat:@"%C", c];
  }
  [o appendString:@"\""];
  return o;
}

const char* ane_fake_report(void) {
  fake_init();
  static char* last = NULL;
  NSAutoreleasePool* pool = [[NSAutoreleasePool alloc] init];
  NSMutableString* v = [NSMutableString stringWithString:@"["];
  long cached;
  @synchronized(g_lock) {
    for (NSUInteger i = 0; i < [g_violations count]; ++i)
      [v appendFormat:@"%@%@", i ? @", " : @"", json_string([g_violations objectAtIndex:i])];
    cached = (long)[g_cache count];
  }
  [v appendString:@"]"];
  NSString* s = [NSString stringWithFormat:
      @"{\"violations\": %@, \"surface_violations\": %ld, \"last_surface_violation\": %@, \"surfaces_live\": %ld, "
      @"\"descriptors\": %ld, \"models_created\": %ld, \"models_alive\": %ld, \"compiles\": %ld, "
      @"\"hidden_compiles\": %ld, \"loads\": %ld, \"unloads\": %ld, \"evals\": %ld, \"requests_created\": %ld, "
      @"\"surface_objects\": %ld, \"budget\": %ld, \"cached_programs\": %ld, \"last_weight_entry\": %@}",
      v, orion_iosurface_violation_count(), json_string([NSString stringWithUTF8String:orion_iosurface_last_violation()]),
      orion_iosurface_live_count(), g_fake.descriptors, g_fake.models_created, g_fake.models_alive, g_fake.compiles,
      g_fake.hidden_compiles, g_fake.loads, g_fake.unloads, g_fake.evals, g_fake.requests_created,
      g_fake.surface_objects, g_fake.budget, cached, json_string(g_last_entry ? g_last_entry : @"")];
  free(last);
  last = strdup([s UTF8String]);
  [pool drain];
  return last;
}

// Clears the violation log (and with clear_cache, the daemon's compiled programs and the compile count).
void ane_fake_reset(int clear_cache) {
  fake_init();
  @synchronized(g_lock) {
    [g_violations removeAllObjects];
    if (clear_cache) {
      [g_cache removeAllObjects];
      g_fake.compiles = g_fake.hidden_compiles = 0;
    }
  }
}

long ane_fake_violation_count(void) {
  fake_init();
  @synchronized(g_lock) { return (long)[g_violations count]; }
}

void ane_fake_set_budget(long budget) {
  fake_init();
  g_fake.budget = budget;
}

// Switches on or off a behaviour a real Mac might show (tests/ane/test_ane_working_code.py): "id_style"
// (0 upstream, 1 another safe shape, 2 unsafe), "unload_no" (unloads answer NO with an NSError after
// doing their work). Returns 0, or -1 for an unknown name.
int ane_fake_set(const char* name, long value) {
  fake_init();
  if (!strcmp(name, "id_style")) g_fake.id_style = value;
  else if (!strcmp(name, "unload_no")) g_fake.unload_no = value;
  else return -1;
  return 0;
}
