/* The ROCm SMI API cder uses, from the installed header (Debian's
 * librocm-smi-dev). Nothing links against librocm_smi64: cder loads it at
 * run time, so a node without ROCm still runs cderd for its other devices. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <rocm_smi/rocm_smi.h>
