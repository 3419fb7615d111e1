// See ane_guard.h. Compiled as Objective-C with -fno-objc-arc (manual retain/release).
#import "ane_guard.h"

NSException* orion_ane_guard(void (*fn)(void* ctx), void* ctx) {
  @try {
    fn(ctx);
  } @catch (NSException* e) {
    return [e retain];
  }
  return nil;
}
