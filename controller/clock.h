// The controller's clock as control::Controller takes it: monotonic and wall time, in ms.
#pragma once

#include "grl/control/control.h"
#include "grl/daemon/loop.h"

namespace grl::controller {

inline control::Clock now() {
    return {daemon::mono_ms(), daemon::wall_ms()};
}

}  // namespace grl::controller
