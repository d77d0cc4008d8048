/* placeholder until the native prefix-value experts land */
#include <stddef.h>
#include "shadow.h"
hkv_expert *hkv_prefix_new(int64_t capacity, int aging, int bypass, int use_worth,
                           double history_factor) {
    (void)capacity; (void)aging; (void)bypass; (void)use_worth; (void)history_factor;
    return NULL;
}
