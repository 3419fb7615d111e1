// Our own declarations of the private AppleNeuralEngine.framework classes, with the argument and
// return types that public projects calling it use and a decompilation confirms (nothing here was
// checked on a Mac by us; docs/ane-framework.md).
//
// Calling style: one protocol per class for its `+` methods (a Class object answers
// them) and one for its `-` methods. Classes are looked up at run time with NSClassFromString and cast
// to `id<...Class>`, so no class symbol is referenced at link time and every call is an ordinary,
// correctly typed message send (no casted objc_msgSend: that does not exist on GNUstep's GCC runtime
// and is an ABI hazard on arm64). Manual retain/release: these files are built with -fno-objc-arc.
#pragma once
#import <Foundation/Foundation.h>
#include <IOSurface/IOSurface.h>  // the real framework on macOS; tests/ane_fake's shim on Linux

// --- _ANEInMemoryModelDescriptor -----------------------------------------------------------------
@protocol OrionANEInMemoryModelDescriptorClass
// MIL text as UTF-8 NSData (never NSString: C09); weights never nil (C11); options plist or nil.
// Returns nil on invalid input.
- (id)modelWithMILText:(NSData*)milText weights:(NSDictionary*)weights optionsPlist:(NSData*)optionsPlist;
@end

@protocol OrionANEInMemoryModelDescriptor
- (NSString*)hexStringIdentifier;  // <sha(MIL)>_<sha(weights)>_<sha(options)>, upper-case hex
- (NSDictionary*)weights;          // the stored weight dictionary (decompiled; optional, guarded)
@end

// --- _ANEInMemoryModel ---------------------------------------------------------------------------
@protocol OrionANEInMemoryModelClass
- (id)inMemoryModelWithDescriptor:(id)descriptor;
@end

@protocol OrionANEInMemoryModel
- (NSString*)hexStringIdentifier;
// options: an empty dictionary, never nil (the framework mutable-copies it and adds its own keys).
- (BOOL)compileWithQoS:(unsigned int)qos options:(NSDictionary*)options error:(NSError**)error;
- (BOOL)loadWithQoS:(unsigned int)qos options:(NSDictionary*)options error:(NSError**)error;
// Returns NO with *error left nil when the request fails -validate (limits: C42).
- (BOOL)evaluateWithQoS:(unsigned int)qos options:(NSDictionary*)options request:(id)request error:(NSError**)error;
// Also deletes the model's temp directory.
- (BOOL)unloadWithQoS:(unsigned int)qos error:(NSError**)error;
// Optional introspection (seen decompiled only); guarded with respondsToSelector: before use.
- (BOOL)compiledModelExists;
- (unsigned long)state;
@end

// --- _ANERequest ---------------------------------------------------------------------------------
@protocol OrionANERequestClass
// Every parameter is an object: NSArray<_ANEIOSurfaceObject*>, NSArray<NSNumber*> symbol indices,
// weightsBuffer (nil), perfStats (nil), procedureIndex NSNumber (@0).
- (id)requestWithInputs:(NSArray*)inputs
           inputIndices:(NSArray*)inputIndices
                outputs:(NSArray*)outputs
          outputIndices:(NSArray*)outputIndices
          weightsBuffer:(id)weightsBuffer
              perfStats:(id)perfStats
         procedureIndex:(NSNumber*)procedureIndex;
@end

@protocol OrionANERequest
- (BOOL)validate;
@end

// --- _ANEIOSurfaceObject -------------------------------------------------------------------------
@protocol OrionANEIOSurfaceObjectClass
- (id)objectWithIOSurface:(IOSurfaceRef)surface;  // retains the surface; nil for NULL
@end

@protocol OrionANEIOSurfaceObject
- (IOSurfaceRef)ioSurface;
@end

// --- _ANEDeviceInfo (all class methods) ----------------------------------------------------------
@protocol OrionANEDeviceInfoClass
- (BOOL)hasANE;
- (unsigned int)numANEs;
- (unsigned int)numANECores;
- (NSString*)aneArchitectureType;
- (NSString*)aneSubType;
- (NSString*)aneSubTypeVariant;
- (NSString*)aneSubTypeProductVariant;
- (NSString*)aneSubTypeAndVariant;  // absent from older framework builds: optional
- (long long)aneBoardType;
- (NSString*)productName;
- (NSString*)buildVersion;
- (BOOL)isVirtualMachine;
@end

// --- the direct route: _ANEModel + _ANEClient, what _ANEInMemoryModel calls internally -----------
// Only compileModel:options:qos:error: and evaluateWithModel:options:request:qos:error: were seen
// spelled out when this was written; loadModel:/unloadModel: are written by symmetry ("loadModel:…") and are
// checked with respondsToSelector: before the route is offered.
@protocol OrionANEModelClass
- (id)modelAtURL:(NSURL*)url key:(NSString*)key;
@end

@protocol OrionANEClientClass
- (id)sharedConnection;
@end

@protocol OrionANEClient
- (BOOL)compileModel:(id)model options:(NSDictionary*)options qos:(unsigned int)qos error:(NSError**)error;
- (BOOL)loadModel:(id)model options:(NSDictionary*)options qos:(unsigned int)qos error:(NSError**)error;
- (BOOL)evaluateWithModel:(id)model
                  options:(NSDictionary*)options
                  request:(id)request
                      qos:(unsigned int)qos
                    error:(NSError**)error;
- (BOOL)unloadModel:(id)model options:(NSDictionary*)options qos:(unsigned int)qos error:(NSError**)error;
@end

// QoS for every call: QOS_CLASS_DEFAULT, what every upstream runtime passes (0 is real-time).
enum { kOrionANEQoS = 21 };
