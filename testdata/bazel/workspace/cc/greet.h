#ifndef GANTRY_E2E_GREET_H_
#define GANTRY_E2E_GREET_H_

#include <stdio.h>

/* Writes a greeting for name to out. */
void greet(FILE *out, const char *name);

#endif
