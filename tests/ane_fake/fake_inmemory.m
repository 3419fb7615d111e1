// Fake _ANEInMemoryModelDescriptor / _ANEInMemoryModel: the behaviour of docs/ane-framework.md
// (identifier = hashes of MIL, weights and options; files saved once per model object; load reuses the
// daemon's program for a known identifier, else compiles implicitly; unload deletes the folder), plus
// the contract checks of every call.
#import "fake_contract.h"

static NSString* hex(NSData* d) {
  char out[65];
  fake_sha256_upper([d bytes], [d length], out);
  return [NSString stringWithUTF8String:out];
}

@interface _ANEInMemoryModelDescriptor : NSObject {
 @public
  NSData *text, *options;
  NSDictionary* weights;
  NSString* identifier;
}
@end

@implementation _ANEInMemoryModelDescriptor
+ (id)modelWithMILText:(id)milText weights:(id)w optionsPlist:(id)opts {
  if (!milText || !w) {
    fake_violation(NO, @"+modelWithMILText:weights:optionsPlist: got nil %s (C09/C11): the descriptor is nil",
                   milText ? "weights" : "MIL text");
    return nil;  // "Invalid arguments"
  }
  if (![milText isKindOfClass:[NSData class]])
    fake_violation(YES, @"MIL text passed as %@, not NSData (C09): the real hash sends -bytes to it", [milText class]);
  if (![w isKindOfClass:[NSDictionary class]]) fake_violation(YES, @"weights is a %@, not an NSDictionary", [w class]);
  if (opts && ![opts isKindOfClass:[NSData class]]) fake_violation(YES, @"optionsPlist is a %@, not NSData", [opts class]);
  NSArray* keys = [[w allKeys] sortedArrayUsingSelector:@selector(compare:)];
  NSMutableData* blobs = [NSMutableData data];
  NSMutableString* shape = [NSMutableString string];
  for (NSString* key in keys) {
    id entry = [w objectForKey:key];
    if (![key hasPrefix:@"@model_path/"]) fake_violation(NO, @"weight key '%@' does not start with @model_path/", key);
    if (![entry isKindOfClass:[NSDictionary class]] || [entry count] == 0) {
      fake_violation(NO, @"Empty weights dictionary for index '%@' (C11): the descriptor is nil", key);
      return nil;
    }
    id firstKey = [[entry allKeys] objectAtIndex:0], first = [[entry allValues] objectAtIndex:0];
    if (![first isKindOfClass:[NSData class]])
      fake_violation(YES, @"weight entry '%@' enumerates '%@' (%@) first: the framework sends -bytes to it "
                          @"(reference §4 ordering hazard)", key, firstKey, [first class]);
    if (![firstKey isEqual:@"data"]) fake_violation(NO, @"weight entry '%@' first key is '%@', not 'data'", key, firstKey);
    [blobs appendData:first];
    if (![shape length])
      for (id k in entry) {
        id v = [entry objectForKey:k];
        BOOL data = [v isKindOfClass:[NSData class]], number = [v isKindOfClass:[NSNumber class]];
        [shape appendFormat:@"%@%@:%@ %@", [shape length] ? @", " : @"", k,
                            data ? @"NSData" : number ? @"NSNumber" : NSStringFromClass([v class]),
                            data ? [NSString stringWithFormat:@"%lu B", (unsigned long)[v length]] : v];
      }
  }
  fake_note_entry(shape);
  _ANEInMemoryModelDescriptor* d = [[[self alloc] init] autorelease];
  d->text = [milText copy];
  d->weights = [w copy];
  d->options = [opts copy];
  NSString *hm = hex(milText), *hw = hex(blobs), *ho = hex(opts ? opts : [NSData data]);
  if (g_fake.id_style == 1)  // another shape: working code uses whatever the framework returns
    d->identifier = [[NSString alloc] initWithFormat:@"%@-%@-%@", [[hm substringToIndex:32] lowercaseString],
                                                     [[hw substringToIndex:32] lowercaseString], [[ho substringToIndex:8] lowercaseString]];
  else if (g_fake.id_style == 2)  // a name that would escape NSTemporaryDirectory()
    d->identifier = [[NSString alloc] initWithFormat:@"../orion-escape-%@", [hm substringToIndex:16]];
  else
    d->identifier = [[NSString alloc] initWithFormat:@"%@_%@_%@", hm, hw, ho];
  g_fake.descriptors++;
  return d;
}
- (void)dealloc {
  [text release];
  [options release];
  [weights release];
  [identifier release];
  [super dealloc];
}
- (NSString*)hexStringIdentifier { return identifier; }
- (NSData*)networkText { return text; }
- (NSDictionary*)weights { return weights; }
- (NSData*)optionsPlist { return options; }
- (BOOL)isMILModel { return YES; }
@end

@interface _ANEInMemoryModel : NSObject {
  _ANEInMemoryModelDescriptor* descriptor;
  NSString* identifier;
  OrionFakeCompiled* compiled;  // what a load bound (retained)
  BOOL saved, loaded, dead;
  long load_mark;  // request serial at the last load
  unsigned long state;
}
@end

@implementation _ANEInMemoryModel
+ (id)inMemoryModelWithDescriptor:(id)d {
  if (![d isKindOfClass:[_ANEInMemoryModelDescriptor class]]) {
    fake_violation(NO, @"+inMemoryModelWithDescriptor: got %@", d ? (id)[d class] : (id)@"nil");
    return nil;
  }
  _ANEInMemoryModel* m = [[[self alloc] init] autorelease];
  m->descriptor = [d retain];
  m->identifier = [[d hexStringIdentifier] copy];
  g_fake.models_created++;
  g_fake.models_alive++;
  return m;
}

- (void)alive:(const char*)sel {
  if (dead) fake_violation(YES, @"-[_ANEInMemoryModel %s] sent to a released model (use after release)", sel);
}

- (void)dealloc {
  // Zombie (never [super dealloc]): a later message is reported instead of crashing at random.
  if (loaded) fake_violation(NO, @"_ANEInMemoryModel %@ released while loaded (unload before release)", identifier);
  [descriptor release];
  [compiled release];
  descriptor = nil;
  compiled = nil;
  dead = YES;
  g_fake.models_alive--;
}

- (NSString*)hexStringIdentifier {
  [self alive:"hexStringIdentifier"];
  return identifier;
}

// C44: the caller writes model.mil and every weight file before compiling; and weights/ exists even
// without weights, as working code always creates it.
- (void)checkFolder:(const char*)sel {
  NSString* dir = fake_folder(identifier);
  BOOL isdir = NO;
  if (![[NSFileManager defaultManager] fileExistsAtPath:[dir stringByAppendingPathComponent:@"weights"] isDirectory:&isdir] ||
      !isdir)
    fake_violation(NO, @"%s: %@/weights/ is missing (working code always creates it)", sel, dir);
  NSData* mil = [NSData dataWithContentsOfFile:[dir stringByAppendingPathComponent:@"model.mil"]];
  if (![mil isEqualToData:descriptor->text])
    fake_violation(YES, @"%s: %@/model.mil is %s (the temp folder must be pre-populated, C44)", sel, dir,
                   mil ? "not the MIL text" : "missing");
  for (NSString* key in descriptor->weights) {
    NSString* rel = [key substringFromIndex:[@"@model_path/" length]];
    NSData* file = [NSData dataWithContentsOfFile:[dir stringByAppendingPathComponent:rel]];
    NSData* blob = [[[descriptor->weights objectForKey:key] allValues] objectAtIndex:0];
    if (![file isEqualToData:blob])
      fake_violation(YES, @"%s: weight file %@ is %s (the temp folder must be pre-populated, C44)", sel, rel,
                     file ? "not the weight blob" : "missing");
  }
}

// Framework save step on the first compile, once per model object: net.plist = MIL text, each entry's first
// value under its first key.
- (void)saveFiles {
  if (saved) return;
  NSString* dir = fake_folder(identifier);
  [[NSFileManager defaultManager] createDirectoryAtPath:dir withIntermediateDirectories:YES attributes:nil error:NULL];
  [descriptor->text writeToFile:[dir stringByAppendingPathComponent:@"net.plist"] atomically:YES];
  for (NSString* key in descriptor->weights) {
    NSDictionary* entry = [descriptor->weights objectForKey:key];
    [[[entry allValues] objectAtIndex:0] writeToFile:[dir stringByAppendingPathComponent:[[entry allKeys] objectAtIndex:0]]
                                          atomically:YES];
  }
  saved = YES;
}

- (BOOL)compileWithQoS:(unsigned int)qos options:(NSDictionary*)options error:(NSError**)error {
  [self alive:"compileWithQoS:options:error:"];
  fake_check_qos(qos, "-[_ANEInMemoryModel compileWithQoS:options:error:]");
  fake_check_options(options, "-[_ANEInMemoryModel compileWithQoS:options:error:]");
  [self checkFolder:"compileWithQoS:options:error:"];
  [self saveFiles];
  OrionFakeCompiled* c = fake_compile_folder(identifier, NO, error);
  if (!c) return NO;
  state = 1;
  return YES;
}

- (BOOL)loadWithQoS:(unsigned int)qos options:(NSDictionary*)options error:(NSError**)error {
  [self alive:"loadWithQoS:options:error:"];
  fake_check_qos(qos, "-[_ANEInMemoryModel loadWithQoS:options:error:]");
  fake_check_options(options, "-[_ANEInMemoryModel loadWithQoS:options:error:]");
  if (loaded) fake_violation(YES, @"loadWithQoS: on a model that is already loaded");
  OrionFakeCompiled* c = fake_cached(identifier);  // aned's program for this identifier (C07)
  if (!c) {
    [self checkFolder:"loadWithQoS:options:error:"];
    [self saveFiles];
    c = fake_compile_folder(identifier, YES, error);  // implicit compile inside the daemon
    if (!c) return NO;
  }
  [compiled release];
  compiled = [c retain];
  loaded = YES;
  load_mark = fake_request_serial();
  state = 3;
  g_fake.loads++;
  return YES;
}

- (BOOL)evaluateWithQoS:(unsigned int)qos options:(NSDictionary*)options request:(id)request error:(NSError**)error {
  [self alive:"evaluateWithQoS:options:request:error:"];
  fake_check_qos(qos, "-[_ANEInMemoryModel evaluateWithQoS:options:request:error:]");
  fake_check_options(options, "-[_ANEInMemoryModel evaluateWithQoS:options:request:error:]");
  if (!loaded) {
    fake_violation(YES, @"evaluateWithQoS: on a model that is not loaded");
    return NO;
  }
  return fake_evaluate(compiled, request, load_mark, error);
}

- (BOOL)unloadWithQoS:(unsigned int)qos error:(NSError**)error {
  [self alive:"unloadWithQoS:error:"];
  fake_check_qos(qos, "-[_ANEInMemoryModel unloadWithQoS:error:]");
  if (!loaded) fake_violation(YES, @"unloadWithQoS: on a model that is not loaded");
  [[NSFileManager defaultManager] removeItemAtPath:fake_folder(identifier) error:NULL];  // as the real unload
  [compiled release];
  compiled = nil;
  loaded = NO;
  state = 1;
  g_fake.unloads++;
  if (g_fake.unload_no) {  // did its work, answers NO (working code ignores the answer)
    if (error) *error = fake_error(@"com.apple.appleneuralengine", 5, @"fake: unloadWithQoS reported a failure");
    return NO;
  }
  return YES;
}

- (BOOL)compiledModelExists {
  [self alive:"compiledModelExists"];
  return fake_cached(identifier) != nil;
}

- (unsigned long)state {
  return state;
}
@end
