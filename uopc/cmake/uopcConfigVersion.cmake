# The version of uopc whose package this is (uopc.__version__; tests/test_cmake.py checks they agree).
# find_package(uopc X.Y CONFIG) takes it when X.Y is not newer and its major version is the same.
set(PACKAGE_VERSION "0.1.0")
set(PACKAGE_VERSION_COMPATIBLE TRUE)
if(PACKAGE_FIND_VERSION)
  string(REGEX MATCH "^[0-9]+" _uopc_major "${PACKAGE_VERSION}")
  if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION OR NOT PACKAGE_FIND_VERSION_MAJOR EQUAL _uopc_major)
    set(PACKAGE_VERSION_COMPATIBLE FALSE)
  elseif(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
