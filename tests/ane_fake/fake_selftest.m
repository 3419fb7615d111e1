// Self-test of the fake AppleNeuralEngine: breaks each documented rule on purpose and checks that the
// fake notices (a violation is logged, and the call raises or fails as specified). Proves that the
// contract checks the backend runs against are live. Usage: orion_ane_fake_selftest <fake .so path>
#import <Foundation/Foundation.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "IOSurface/IOSurface.h"
#include "ane/ane_private.h"

static long (*violations)(void);
static void (*set_budget)(long);
static int failures = 0;

#define EXPECT(cond, what)                                          \
  do {                                                              \
    if (cond) printf("ok    %s\n", what);                           \
    else { printf("FAIL  %s\n", what); failures++; }                \
  } while (0)

// Runs block-free code: a function pointer and context, returns YES when it raised.
static BOOL raises(void (*fn)(void*), void* ctx) {
  @try {
    fn(ctx);
  } @catch (NSException* e) {
    return YES;
  }
  return NO;
}

static id<OrionANEInMemoryModelDescriptorClass> DC;
static id<OrionANEInMemoryModelClass> MC;
static id<OrionANERequestClass> RC;
static id<OrionANEIOSurfaceObjectClass> SC;

static NSString* mil(void) {
  return @"program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 64, 1, 384]> a, tensor<fp16, [1, 64, 1, 384]> b) {\n"
         @"        tensor<fp16, [1, 64, 1, 384]> z = add(x = a, y = b)[name = string(\"z\")];\n    } -> (z);\n}\n";
}
static NSData* mil_data(void) { return [mil() dataUsingEncoding:NSUTF8StringEncoding]; }

static void desc_with_string(void* p) { [DC modelWithMILText:(NSData*)mil() weights:[NSDictionary dictionary] optionsPlist:nil]; }
static void desc_offset_first(void* p) {
  NSDictionary* entry = [NSDictionary dictionaryWithObject:[NSNumber numberWithInt:0] forKey:@"offset"];
  NSDictionary* w = [NSDictionary dictionaryWithObject:entry forKey:@"@model_path/weights/w.bin"];
  [DC modelWithMILText:mil_data() weights:w optionsPlist:nil];
}

static id model_for(NSData* text) {
  id d = [DC modelWithMILText:text weights:[NSDictionary dictionary] optionsPlist:nil];
  return [MC inMemoryModelWithDescriptor:d];
}

static NSString* folder_of(id m) {
  return [NSTemporaryDirectory() stringByAppendingPathComponent:[(id<OrionANEInMemoryModel>)m hexStringIdentifier]];
}

static void populate(id m, NSData* text) {
  NSString* dir = folder_of(m);
  [[NSFileManager defaultManager] createDirectoryAtPath:[dir stringByAppendingPathComponent:@"weights"]
                            withIntermediateDirectories:YES attributes:nil error:NULL];
  [text writeToFile:[dir stringByAppendingPathComponent:@"model.mil"] atomically:YES];
}

static void compile_qos0(void* m) { [(id<OrionANEInMemoryModel>)m compileWithQoS:0 options:[NSDictionary dictionary] error:NULL]; }
static void compile_nil_options(void* m) { [(id<OrionANEInMemoryModel>)m compileWithQoS:21 options:nil error:NULL]; }
static void compile_ok(void* m) { [(id<OrionANEInMemoryModel>)m compileWithQoS:21 options:[NSDictionary dictionary] error:NULL]; }
static void use_after_release(void* m) { [(id<OrionANEInMemoryModel>)m hexStringIdentifier]; }

static IOSurfaceRef surface(size_t bytes) {
  id keys[] = {(id)kIOSurfaceWidth, (id)kIOSurfaceHeight, (id)kIOSurfaceBytesPerElement,
               (id)kIOSurfaceBytesPerRow, (id)kIOSurfaceAllocSize, (id)kIOSurfacePixelFormat};
  id vals[] = {[NSNumber numberWithUnsignedLong:bytes], [NSNumber numberWithInt:1], [NSNumber numberWithInt:1],
               [NSNumber numberWithUnsignedLong:bytes], [NSNumber numberWithUnsignedLong:bytes], [NSNumber numberWithInt:0]};
  return IOSurfaceCreate((CFDictionaryRef)[NSDictionary dictionaryWithObjects:vals forKeys:keys count:6]);
}

static IOSurfaceRef g_locked;  // set by request_locked: an input the CPU still holds locked

static id request_with(size_t a, size_t b, size_t z, BOOL lock_first) {
  IOSurfaceRef s[3] = {surface(a), surface(b), surface(z)};
  id o[3];
  if (lock_first) {
    IOSurfaceLock(s[0], 0, NULL);
    g_locked = s[0];
  }
  for (int i = 0; i < 3; ++i) {
    o[i] = [SC objectWithIOSurface:s[i]];
    CFRelease(s[i]);  // the wrapper holds its own reference
  }
  NSArray* zero_one = [NSArray arrayWithObjects:[NSNumber numberWithInt:0], [NSNumber numberWithInt:1], nil];
  return [RC requestWithInputs:[NSArray arrayWithObjects:o[0], o[1], nil] inputIndices:zero_one
                       outputs:[NSArray arrayWithObject:o[2]] outputIndices:[NSArray arrayWithObject:[NSNumber numberWithInt:0]]
                 weightsBuffer:nil perfStats:nil procedureIndex:[NSNumber numberWithInt:0]];
}

static id request(size_t a, size_t b, size_t z) { return request_with(a, b, z, NO); }

int main(int argc, char** argv) {
  NSAutoreleasePool* pool = [[NSAutoreleasePool alloc] init];
  if (argc < 2 || !dlopen(argv[1], RTLD_NOW)) {
    fprintf(stderr, "usage: %s <path of the fake libAppleNeuralEngine.so> (%s)\n", argv[0], dlerror());
    return 2;
  }
  void* h = dlopen(argv[1], RTLD_NOW);
  violations = (long (*)(void))dlsym(h, "ane_fake_violation_count");
  set_budget = (void (*)(long))dlsym(h, "ane_fake_set_budget");
  DC = (id)NSClassFromString(@"_ANEInMemoryModelDescriptor");
  MC = (id)NSClassFromString(@"_ANEInMemoryModel");
  RC = (id)NSClassFromString(@"_ANERequest");
  SC = (id)NSClassFromString(@"_ANEIOSurfaceObject");
  long v = violations();
  long sv = 0;

  EXPECT(raises(desc_with_string, NULL) && violations() == ++v, "MIL text as NSString raises (C09)");
  EXPECT(![DC modelWithMILText:mil_data() weights:nil optionsPlist:nil] && violations() == ++v, "nil weights -> nil (C11)");
  NSDictionary* empty = [NSDictionary dictionaryWithObject:[NSDictionary dictionary] forKey:@"@model_path/weights/w.bin"];
  EXPECT(![DC modelWithMILText:mil_data() weights:empty optionsPlist:nil] && violations() == ++v, "empty weight entry -> nil (C11)");
  EXPECT(raises(desc_offset_first, NULL) && violations() >= ++v, "entry enumerating offset first raises (§4)");
  v = violations();

  NSAutoreleasePool* inner = [[NSAutoreleasePool alloc] init];
  id m = [model_for(mil_data()) retain];  // retain count 1 once the inner pool is drained
  [inner drain];
  [[NSFileManager defaultManager] removeItemAtPath:folder_of(m) error:NULL];  // left by an earlier run
  v += 2;  // weights/ missing (logged) + model.mil missing (raises)
  EXPECT(raises(compile_ok, m) && violations() == v, "compile before the folder is populated raises (C44, weights/)");
  populate(m, mil_data());
  EXPECT(raises(compile_qos0, m) && violations() == ++v, "QoS 0 raises (must be 21)");
  EXPECT(raises(compile_nil_options, m) && violations() == ++v, "nil options raise");
  NSError* err = nil;
  EXPECT([(id<OrionANEInMemoryModel>)m compileWithQoS:21 options:[NSDictionary dictionary] error:&err], "valid compile works");
  EXPECT([(id<OrionANEInMemoryModel>)m loadWithQoS:21 options:[NSDictionary dictionary] error:&err], "load works");

  err = nil;
  BOOL ok = [(id<OrionANEInMemoryModel>)m evaluateWithQoS:21 options:[NSDictionary dictionary]
                                                   request:request(49152, 49152, 49152) error:&err];
  EXPECT(ok && violations() == v, "evaluate with 49,152-byte uniform surfaces works");
  err = nil;
  ok = [(id<OrionANEInMemoryModel>)m evaluateWithQoS:21 options:[NSDictionary dictionary]
                                              request:request(4096, 4096, 49152) error:&err];
  EXPECT(!ok && [err code] == 8 && violations() == ++v, "surfaces < 49,152 B: code 8 (0x1d) + violation (C04)");
  err = nil;
  ok = [(id<OrionANEInMemoryModel>)m evaluateWithQoS:21 options:[NSDictionary dictionary]
                                              request:request(49152, 65536, 49152) error:&err];
  EXPECT(!ok && [err code] == 8 && violations() == ++v, "non-uniform input surfaces: code 8 + violation (C12)");
  err = nil;
  sv = orion_iosurface_violation_count();
  ok = [(id<OrionANEInMemoryModel>)m evaluateWithQoS:21 options:[NSDictionary dictionary]
                                              request:request_with(49152, 49152, 49152, YES) error:&err];
  EXPECT(orion_iosurface_violation_count() == sv + 1 && violations() == v, "evaluate with a CPU-locked surface is a violation");
  IOSurfaceUnlock(g_locked, 0, NULL);
  id old = [request(49152, 49152, 49152) retain];
  [(id<OrionANEInMemoryModel>)m unloadWithQoS:21 error:&err];
  populate(m, mil_data());
  [(id<OrionANEInMemoryModel>)m loadWithQoS:21 options:[NSDictionary dictionary] error:&err];
  ok = [(id<OrionANEInMemoryModel>)m evaluateWithQoS:21 options:[NSDictionary dictionary] request:old error:&err];
  EXPECT(ok && violations() == ++v, "evaluate with a request built before the last load is a violation");
  [old release];
  id bad = [RC requestWithInputs:[NSArray array] inputIndices:[NSArray array] outputs:[NSArray array]
                   outputIndices:[NSArray array] weightsBuffer:nil perfStats:nil procedureIndex:[NSNumber numberWithInt:0]];
  EXPECT(![(id<OrionANERequest>)bad validate], "-validate rejects a request without buffers (C42)");
  err = nil;
  ok = [(id<OrionANEInMemoryModel>)m evaluateWithQoS:21 options:[NSDictionary dictionary] request:bad error:&err];
  EXPECT(!ok && err == nil && violations() == ++v, "evaluate of an invalid request: NO, nil error, violation");

  [[NSFileManager defaultManager] removeItemAtPath:folder_of(m) error:NULL];
  [m release];  // still loaded
  EXPECT(violations() == ++v, "release while loaded is a violation (unload before release)");
  EXPECT(raises(use_after_release, m) && violations() == ++v, "use after release raises");

  inner = [[NSAutoreleasePool alloc] init];
  NSData* text2 = [[@"program(1.3)\n{ }\n" dataUsingEncoding:NSUTF8StringEncoding] retain];
  id m2 = [model_for(text2) retain];
  [inner drain];
  populate(m2, text2);
  set_budget(0);
  err = nil;
  ok = [(id<OrionANEInMemoryModel>)m2 compileWithQoS:21 options:[NSDictionary dictionary] error:&err];
  EXPECT(!ok && err == nil, "past the compile budget: NO without an NSError (C05)");
  set_budget(1000000);
  [[NSFileManager defaultManager] removeItemAtPath:folder_of(m2) error:NULL];
  [m2 release];

  sv = orion_iosurface_violation_count();
  IOSurfaceRef s = surface(49152);
  CFRelease(s);
  IOSurfaceGetBaseAddress(s);
  EXPECT(orion_iosurface_violation_count() == sv + 1, "IOSurface use after CFRelease is a violation");
  id keys[] = {(id)kIOSurfaceWidth, (id)kIOSurfaceAllocSize};
  id vals[] = {[NSNumber numberWithInt:49152], [NSNumber numberWithInt:49152]};
  IOSurfaceRef s2 = IOSurfaceCreate((CFDictionaryRef)[NSDictionary dictionaryWithObjects:vals forKeys:keys count:2]);
  EXPECT(orion_iosurface_violation_count() == sv + 2, "IOSurface without the reference's properties is a violation");
  if (s2) CFRelease(s2);
  IOSurfaceRef s3 = surface(49152);
  IOSurfaceGetBaseAddress(s3);
  EXPECT(orion_iosurface_violation_count() == sv + 3, "IOSurfaceGetBaseAddress without a lock is a violation");
  IOSurfaceLock(s3, 0, NULL);
  unsigned char* bytes = IOSurfaceGetBaseAddress(s3);
  bytes[0] = 1;  // under the lock: fine
  IOSurfaceUnlock(s3, 0, NULL);
  bytes[1] = 1;  // outside: noticed at the next lock
  IOSurfaceLock(s3, 0, NULL);
  IOSurfaceUnlock(s3, 0, NULL);
  EXPECT(orion_iosurface_violation_count() == sv + 4, "a CPU write outside IOSurfaceLock/Unlock is a violation");
  CFRelease(s3);

  [pool drain];
  printf("%s: %d failure(s)\n", failures ? "FAILED" : "passed", failures);
  return failures ? 1 : 0;
}
