// Test-only stub of <objc/runtime.h>: the associated-object calls of uopc's Metal launcher.
#pragma once
typedef enum { OBJC_ASSOCIATION_ASSIGN = 0, OBJC_ASSOCIATION_RETAIN_NONATOMIC = 1, OBJC_ASSOCIATION_RETAIN = 01401 } objc_AssociationPolicy;
id objc_getAssociatedObject(id object, const void *key);
void objc_setAssociatedObject(id object, const void *key, id value, objc_AssociationPolicy policy);
