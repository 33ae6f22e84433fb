#include <stdio.h>

#include "cc/greet.h"

int main(int argc, char **argv) {
  greet(stdout, argc > 1 ? argv[1] : "world");
  return 0;
}
