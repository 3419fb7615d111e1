// Fake direct route: _ANEModel (+modelAtURL:key:) and _ANEClient (+sharedConnection, compile / load /
// evaluate / unload with a model). Same daemon emulation and checks as the in-memory model; the caller
// must have written net.plist (the in-memory model's save step) besides model.mil and the weights.
#import "fake_contract.h"

@interface _ANEModel : NSObject {
 @public
  NSURL* url;
  NSString* key;
  OrionFakeCompiled* compiled;
  BOOL loaded;
  long load_mark;  // request serial at the last load
}
@end

@implementation _ANEModel
+ (id)modelAtURL:(NSURL*)url key:(NSString*)key {
  if (![url isKindOfClass:[NSURL class]] || ![key isKindOfClass:[NSString class]]) {
    fake_violation(NO, @"+modelAtURL:key: got %@ / %@", url, key);
    return nil;
  }
  if (![[[url path] stringByStandardizingPath] isEqual:[fake_folder(key) stringByStandardizingPath]])
    fake_violation(YES, @"+modelAtURL:key: folder %@ is not NSTemporaryDirectory()/<key>", [url path]);
  _ANEModel* m = [[[self alloc] init] autorelease];
  m->url = [url retain];
  m->key = [key copy];
  g_fake.models_created++;
  g_fake.models_alive++;
  return m;
}
- (void)dealloc {
  if (loaded) fake_violation(NO, @"_ANEModel %@ released while loaded (unload before release)", key);
  [url release];
  [key release];
  [compiled release];
  g_fake.models_alive--;
  [super dealloc];
}
@end

@interface _ANEClient : NSObject
@end

static void check_model(id m, const char* sel) {
  if (![m isKindOfClass:[_ANEModel class]]) fake_violation(YES, @"-[_ANEClient %s] model is a %@", sel, [m class]);
}

static void check_folder(_ANEModel* m, const char* sel) {
  NSString* dir = fake_folder(m->key);
  NSFileManager* fm = [NSFileManager defaultManager];
  for (NSString* f in [NSArray arrayWithObjects:@"model.mil", @"net.plist", nil])
    if (![fm fileExistsAtPath:[dir stringByAppendingPathComponent:f]])
      fake_violation(YES, @"-[_ANEClient %s]: %@ missing from %@ (C44)", sel, f, dir);
}

@implementation _ANEClient
+ (id)sharedConnection {
  static _ANEClient* shared = nil;
  @synchronized(self) {
    if (!shared) shared = [[_ANEClient alloc] init];
  }
  return shared;
}

- (BOOL)compileModel:(id)model options:(NSDictionary*)options qos:(unsigned int)qos error:(NSError**)error {
  check_model(model, "compileModel:options:qos:error:");
  fake_check_qos(qos, "-[_ANEClient compileModel:options:qos:error:]");
  fake_check_options(options, "-[_ANEClient compileModel:options:qos:error:]");
  check_folder(model, "compileModel:options:qos:error:");
  return fake_compile_folder(((_ANEModel*)model)->key, NO, error) != nil;
}

- (BOOL)loadModel:(id)model options:(NSDictionary*)options qos:(unsigned int)qos error:(NSError**)error {
  check_model(model, "loadModel:options:qos:error:");
  fake_check_qos(qos, "-[_ANEClient loadModel:options:qos:error:]");
  fake_check_options(options, "-[_ANEClient loadModel:options:qos:error:]");
  _ANEModel* m = model;
  if (m->loaded) fake_violation(YES, @"loadModel: on a model that is already loaded");
  OrionFakeCompiled* c = fake_cached(m->key);
  if (!c) {
    check_folder(m, "loadModel:options:qos:error:");
    c = fake_compile_folder(m->key, YES, error);
    if (!c) return NO;
  }
  [m->compiled release];
  m->compiled = [c retain];
  m->loaded = YES;
  m->load_mark = fake_request_serial();
  g_fake.loads++;
  return YES;
}

- (BOOL)evaluateWithModel:(id)model
                  options:(NSDictionary*)options
                  request:(id)request
                      qos:(unsigned int)qos
                    error:(NSError**)error {
  check_model(model, "evaluateWithModel:options:request:qos:error:");
  fake_check_qos(qos, "-[_ANEClient evaluateWithModel:options:request:qos:error:]");
  fake_check_options(options, "-[_ANEClient evaluateWithModel:options:request:qos:error:]");
  _ANEModel* m = model;
  if (!m->loaded) {
    fake_violation(YES, @"evaluateWithModel: on a model that is not loaded");
    return NO;
  }
  return fake_evaluate(m->compiled, request, m->load_mark, error);
}

- (BOOL)unloadModel:(id)model options:(NSDictionary*)options qos:(unsigned int)qos error:(NSError**)error {
  check_model(model, "unloadModel:options:qos:error:");
  fake_check_qos(qos, "-[_ANEClient unloadModel:options:qos:error:]");
  fake_check_options(options, "-[_ANEClient unloadModel:options:qos:error:]");
  _ANEModel* m = model;
  if (!m->loaded) fake_violation(YES, @"unloadModel: on a model that is not loaded");
  [[NSFileManager defaultManager] removeItemAtPath:fake_folder(m->key) error:NULL];
  [m->compiled release];
  m->compiled = nil;
  m->loaded = NO;
  g_fake.unloads++;
  if (g_fake.unload_no) {  // did its work, answers NO (working code ignores the answer)
    if (error) *error = fake_error(@"com.apple.appleneuralengine", 5, @"fake: unloadModel reported a failure");
    return NO;
  }
  return YES;
}
@end
