#include "launch/env.h"
