// Declarations only (include/FuzzDriver.h); SwiftPM needs one source file per C target.
#include "FuzzDriver.h"
