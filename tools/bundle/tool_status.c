/* The names of the tools' statuses; the library's own come from mlav_status_string. */
#include "tool_status.h"

const char *mlav_tool_status_string(mlav_status s)
{
    /* on int: the two values are not members of mlav_status */
    switch ((int)s) {
    case 7: return "MLAV_ERR_FORMAT";
    case 8: return "MLAV_ERR_IO";
    }
    return mlav_status_string(s);
}
