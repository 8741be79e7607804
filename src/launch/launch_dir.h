// The launch's own folder (error files, progress, the flight request). Private to launch/.
#pragma once

#include <string>

#include "launch/output_sink.h"

namespace ddptrain {

/// Made under $TMPDIR (one a login shell set may be missing on a compute node: then /tmp), and
/// removed at the launch's end; never a folder this launch did not make (it is removed whole).
/// Error naming the folders tried where none can be made.
std::string make_launch_dir(OutputSink& err);

}  // namespace ddptrain
