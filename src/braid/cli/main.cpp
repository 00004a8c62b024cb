// braid: the command-line entry point.
#include <cstdio>

int main() { std::puts("braid"); return 0; }
