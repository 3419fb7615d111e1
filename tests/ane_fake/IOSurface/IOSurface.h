// Linux stand-in for <IOSurface/IOSurface.h> (tests/ane_fake only): declares exactly the IOSurface and
// CoreFoundation pieces the ANE backend uses, with Apple's signatures, so src/orion_native/ane/*.mm
// compile unchanged. Implemented by iosurface_shim.m (libIOSurface.so), which also checks that every
// surface is created with the properties working code uses (docs/ane-framework.md) and that no released
// surface is touched again.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef const void* CFTypeRef;
typedef const struct __CFString* CFStringRef;
typedef const struct __CFDictionary* CFDictionaryRef;
typedef struct __IOSurface* IOSurfaceRef;
typedef uint32_t IOSurfaceLockOptions;
typedef int kern_return_t;

enum { kIOSurfaceLockReadOnly = 0x00000001, kIOSurfaceLockAvoidSync = 0x00000002 };

extern const CFStringRef kIOSurfaceWidth;
extern const CFStringRef kIOSurfaceHeight;
extern const CFStringRef kIOSurfaceBytesPerElement;
extern const CFStringRef kIOSurfaceBytesPerRow;
extern const CFStringRef kIOSurfaceAllocSize;
extern const CFStringRef kIOSurfacePixelFormat;

// properties: an NSDictionary (toll-free bridged on Apple) of CFStringRef keys -> NSNumber values.
IOSurfaceRef IOSurfaceCreate(CFDictionaryRef properties);
kern_return_t IOSurfaceLock(IOSurfaceRef buffer, IOSurfaceLockOptions options, uint32_t* seed);
kern_return_t IOSurfaceUnlock(IOSurfaceRef buffer, IOSurfaceLockOptions options, uint32_t* seed);
void* IOSurfaceGetBaseAddress(IOSurfaceRef buffer);
size_t IOSurfaceGetAllocSize(IOSurfaceRef buffer);
CFTypeRef CFRetain(CFTypeRef cf);
void CFRelease(CFTypeRef cf);

// Shim-only introspection (not part of Apple's API). The fake device reads and writes through
// orion_iosurface_device_base (a violation while the CPU holds a lock) and reports its writes.
void* orion_iosurface_device_base(IOSurfaceRef buffer);
void orion_iosurface_device_wrote(IOSurfaceRef buffer);
int orion_iosurface_lock_count(IOSurfaceRef buffer);
int orion_iosurface_is_alive(IOSurfaceRef buffer);
long orion_iosurface_live_count(void);
long orion_iosurface_violation_count(void);
const char* orion_iosurface_last_violation(void);

#ifdef __cplusplus
}
#endif
