// IOSurface shim for the Linux fake build (see IOSurface/IOSurface.h). The C API is implemented in
// Objective-C because the properties argument is an NSDictionary and a surface is reference counted
// like a CF object (CFRetain/CFRelease). Released surfaces become zombies: their memory is freed, and
// any later use is a loud contract violation instead of silent memory corruption.
// CPU access under lock (as working code does): IOSurfaceGetBaseAddress needs a lock held, and the bytes
// are fingerprinted whenever the last lock is released; the next IOSurfaceLock finds them changed
// only if the CPU wrote without a lock (the fake device reports its own writes, and reads/writes
// through orion_iosurface_device_base, which needs the surface unlocked).
#import <Foundation/Foundation.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "IOSurface/IOSurface.h"

const CFStringRef kIOSurfaceWidth = (CFStringRef) @"IOSurfaceWidth";
const CFStringRef kIOSurfaceHeight = (CFStringRef) @"IOSurfaceHeight";
const CFStringRef kIOSurfaceBytesPerElement = (CFStringRef) @"IOSurfaceBytesPerElement";
const CFStringRef kIOSurfaceBytesPerRow = (CFStringRef) @"IOSurfaceBytesPerRow";
const CFStringRef kIOSurfaceAllocSize = (CFStringRef) @"IOSurfaceAllocSize";
const CFStringRef kIOSurfacePixelFormat = (CFStringRef) @"IOSurfacePixelFormat";

static long g_live = 0, g_violations = 0;
static char g_last[512];

static void violation(const char* what) {
  @synchronized([NSObject class]) {
    g_violations++;
    snprintf(g_last, sizeof g_last, "%s", what);
  }
  fprintf(stderr, "ANE FAKE CONTRACT VIOLATION (IOSurface): %s\n", what);
  if (getenv("ORION_ANE_FAKE_ABORT")) abort();
}

@interface OrionFakeIOSurface : NSObject {
 @public
  void* base;
  size_t size;
  int locks;
  BOOL dead;
  uint64_t fingerprint;  // of the bytes when the last lock was released
}
@end

@implementation OrionFakeIOSurface
- (void)dealloc {
  // Zombie: free the bytes, keep the object so a use after release is caught, never [super dealloc].
  free(base);
  base = NULL;
  dead = YES;
  @synchronized([NSObject class]) { g_live--; }
}
@end

static OrionFakeIOSurface* live_surface(IOSurfaceRef b, const char* fn) {
  OrionFakeIOSurface* s = (OrionFakeIOSurface*)b;
  if (!s) {
    char m[128];
    snprintf(m, sizeof m, "%s(NULL)", fn);
    violation(m);
    return nil;
  }
  if (s->dead) {
    char m[128];
    snprintf(m, sizeof m, "%s on a released IOSurface (use after CFRelease)", fn);
    violation(m);
    return nil;
  }
  return s;
}

static uint64_t fingerprint_of(const OrionFakeIOSurface* s) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char* p = (const unsigned char*)s->base;
  size_t i = 0;
  for (; i + 8 <= s->size; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < s->size; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static long long number(NSDictionary* d, CFStringRef key, BOOL* ok) {
  id v = [d objectForKey:(id)key];
  if (![v isKindOfClass:[NSNumber class]]) {
    *ok = NO;
    return -1;
  }
  return [v longLongValue];
}

IOSurfaceRef IOSurfaceCreate(CFDictionaryRef properties) {
  NSDictionary* d = (NSDictionary*)properties;
  if (![d isKindOfClass:[NSDictionary class]]) {
    violation("IOSurfaceCreate: properties is not a dictionary");
    return NULL;
  }
  BOOL ok = YES;
  long long w = number(d, kIOSurfaceWidth, &ok), h = number(d, kIOSurfaceHeight, &ok);
  long long bpe = number(d, kIOSurfaceBytesPerElement, &ok), bpr = number(d, kIOSurfaceBytesPerRow, &ok);
  long long alloc = number(d, kIOSurfaceAllocSize, &ok), fmt = number(d, kIOSurfacePixelFormat, &ok);
  // The properties working code uses: a flat byte buffer, width = bytes-per-row = alloc size, height 1,
  // 1 byte/element, format 0.
  if (!ok || h != 1 || bpe != 1 || bpr != w || alloc != w || fmt != 0 || w <= 0) {
    char m[256];
    snprintf(m, sizeof m, "IOSurfaceCreate properties differ from the reference's flat buffer: width %lld height %lld "
             "bytesPerElement %lld bytesPerRow %lld allocSize %lld pixelFormat %lld", w, h, bpe, bpr, alloc, fmt);
    violation(m);
    if (alloc <= 0) return NULL;
  }
  OrionFakeIOSurface* s = [[OrionFakeIOSurface alloc] init];
  s->size = (size_t)alloc;
  s->base = calloc(1, (size_t)alloc);
  if (!s->base) {
    [s release];
    return NULL;
  }
  s->fingerprint = fingerprint_of(s);
  @synchronized([NSObject class]) { g_live++; }
  return (IOSurfaceRef)s;
}

kern_return_t IOSurfaceLock(IOSurfaceRef b, IOSurfaceLockOptions options, uint32_t* seed) {
  OrionFakeIOSurface* s = live_surface(b, "IOSurfaceLock");
  if (!s) return 1;
  if (s->locks == 0 && fingerprint_of(s) != s->fingerprint) {
    char m[160];
    snprintf(m, sizeof m, "the CPU wrote to an IOSurface (%zu B) outside IOSurfaceLock/IOSurfaceUnlock", s->size);
    violation(m);
  }
  s->locks++;
  if (seed) *seed = 0;
  return 0;
}

kern_return_t IOSurfaceUnlock(IOSurfaceRef b, IOSurfaceLockOptions options, uint32_t* seed) {
  OrionFakeIOSurface* s = live_surface(b, "IOSurfaceUnlock");
  if (!s) return 1;
  if (s->locks <= 0) {
    violation("IOSurfaceUnlock without a matching IOSurfaceLock");
    return 1;
  }
  if (--s->locks == 0) s->fingerprint = fingerprint_of(s);
  if (seed) *seed = 0;
  return 0;
}

void* IOSurfaceGetBaseAddress(IOSurfaceRef b) {
  OrionFakeIOSurface* s = live_surface(b, "IOSurfaceGetBaseAddress");
  if (s && s->locks == 0) violation("IOSurfaceGetBaseAddress for CPU access without IOSurfaceLock");
  return s ? s->base : NULL;
}

size_t IOSurfaceGetAllocSize(IOSurfaceRef b) {
  OrionFakeIOSurface* s = live_surface(b, "IOSurfaceGetAllocSize");
  return s ? s->size : 0;
}

CFTypeRef CFRetain(CFTypeRef cf) {
  if (!cf) {
    violation("CFRetain(NULL)");
    return NULL;
  }
  id o = (id)cf;
  if ([o isKindOfClass:[OrionFakeIOSurface class]] && !live_surface((IOSurfaceRef)cf, "CFRetain")) return cf;
  return (CFTypeRef)[o retain];
}

void CFRelease(CFTypeRef cf) {
  if (!cf) {
    violation("CFRelease(NULL)");
    return;
  }
  id o = (id)cf;
  if ([o isKindOfClass:[OrionFakeIOSurface class]] && !live_surface((IOSurfaceRef)cf, "CFRelease")) return;
  [o release];
}

void* orion_iosurface_device_base(IOSurfaceRef b) {
  OrionFakeIOSurface* s = live_surface(b, "device access");
  if (s && s->locks > 0) violation("the device accessed an IOSurface the CPU still holds locked (working code unlocks "
                                   "before evaluating)");
  return s ? s->base : NULL;
}

void orion_iosurface_device_wrote(IOSurfaceRef b) {
  OrionFakeIOSurface* s = live_surface(b, "device write");
  if (s) s->fingerprint = fingerprint_of(s);
}

int orion_iosurface_lock_count(IOSurfaceRef b) { return b ? ((OrionFakeIOSurface*)b)->locks : 0; }

int orion_iosurface_is_alive(IOSurfaceRef b) { return b && !((OrionFakeIOSurface*)b)->dead; }
long orion_iosurface_live_count(void) { return g_live; }
long orion_iosurface_violation_count(void) { return g_violations; }
const char* orion_iosurface_last_violation(void) { return g_last; }
