// Test-only stub of the part of Foundation that uopc's Metal launcher uses, so that
// `clang -x objective-c -fobjc-arc -fobjc-runtime=macosx-11.0 -fsyntax-only` can check a generated
// NAME_launcher.m on Linux. Declarations only, copied in shape (not text) from Apple's SDK; what the
// check cannot see: availability attributes, nullability, and anything beyond these selectors.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef unsigned long NSUInteger;
typedef long NSInteger;
typedef signed char BOOL;
#define YES ((BOOL)1)
#define NO ((BOOL)0)
#define nil ((id)0)
#define MIN(a, b) ((a) < (b) ? (a) : (b))

@protocol NSObject
@end

__attribute__((objc_root_class))
@interface NSObject <NSObject>
+ (instancetype)alloc;
- (instancetype)init;
+ (instancetype)new;
@end

@interface NSString : NSObject
+ (instancetype)stringWithUTF8String:(const char *)s;
@end

@interface NSError : NSObject
@end

@interface NSArray : NSObject
- (id)objectAtIndex:(NSUInteger)i;
@property(readonly) NSUInteger count;
@end

@interface NSMutableArray : NSArray
+ (instancetype)arrayWithCapacity:(NSUInteger)n;
- (void)addObject:(id)o;
@end
