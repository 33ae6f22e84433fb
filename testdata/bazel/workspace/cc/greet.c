#include "cc/greet.h"

void greet(FILE *out, const char *name) {
  fprintf(out, "hello, %s (from C)\n", name);
}
