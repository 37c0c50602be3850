#include <level_zero/ze_api.h>
#include <level_zero/zes_api.h>
