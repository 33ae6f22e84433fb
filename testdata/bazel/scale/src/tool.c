/* A tool built once per TOOL_ID; //:report_NN genrules run it. Usage: tool SEED ROUNDS.
 * Prints one line per round, mixing the seed through every library. */
#include <stdio.h>
#include <stdlib.h>

#include "gen/scale.h"

static uint32_t (*const scale_libs[SCALE_NUM_LIBS])(uint32_t) = {SCALE_LIBS};

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s SEED ROUNDS\n", argv[0]);
    return 2;
  }
  uint32_t h = (uint32_t)strtoul(argv[1], NULL, 10) * 2654435761u + TOOL_ID;
  long rounds = strtol(argv[2], NULL, 10);
  for (long i = 0; i < rounds; i++) {
    for (int k = 0; k < SCALE_NUM_LIBS; k++) h = scale_libs[k](h + (uint32_t)i);
    if (i % 16 == 0) printf("tool %d round %ld: %08x\n", TOOL_ID, i, h);
  }
  printf("tool %d final: %08x\n", TOOL_ID, h);
  return 0;
}
