// CPU-only stand-in (see cusparse.h beside it).
#pragma once
#include <cusolver_common.h>
typedef struct cusolverDnContext* cusolverDnHandle_t;
