// Runs a callback and catches any NSException it raises (an unrecognized selector inside the private
// framework, a framework assertion). Lives in a plain Objective-C file because clang's Objective-C++
// on GNUstep's GCC runtime cannot mix @try with C++ exception handling (one personality per file);
// the .mm files therefore contain neither @try nor C++ try/catch, they only throw orion::Error.
#pragma once
#import <Foundation/Foundation.h>

#ifdef __cplusplus
extern "C" {
#endif

// Returns nil, or the exception raised inside fn (retained: the caller releases it). fn must not
// throw C++ exceptions.
NSException* orion_ane_guard(void (*fn)(void* ctx), void* ctx);

#ifdef __cplusplus
}
#endif
