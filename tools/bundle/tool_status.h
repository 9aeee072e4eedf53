/* The tools' own statuses, past the library's: a golden bundle that is malformed, a file that
 * cannot be read or written. Only the bundle code (safetensors.c, bundle.c) returns them and the
 * library never does, so they are not in the public enum; it reserves their values, so that a
 * status means one thing in every program of the project. */
#ifndef MLAV_TOOLS_TOOL_STATUS_H
#define MLAV_TOOLS_TOOL_STATUS_H

#include "mlaverify.h"

#define MLAV_ERR_FORMAT ((mlav_status)7) /* a golden bundle is malformed */
#define MLAV_ERR_IO ((mlav_status)8)     /* a file could not be read or written */

/* Constant name of a status, the library's or the tools' ("MLAV_ERR_FORMAT"); never NULL. */
const char *mlav_tool_status_string(mlav_status s);

#endif
