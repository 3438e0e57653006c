/* A program outside the project, built against the installed libcomm. */
#include <comm.h>
#include <stdio.h>

int main(void) {
  comm_t comm;
  float x[3] = {1, 2, 3}, y[3] = {0, 0, 0};
  if (commInitAll(&comm, 1, NULL) != commSuccess) return 1;
  if (commAllReduce(x, y, 3, commFloat, commSum, comm, NULL) != commSuccess) return 1;
  commDestroy(comm);
  int version = 0;
  commGetVersion(&version);
  printf("consumer: libcomm %d, y = %g %g %g\n", version, y[0], y[1], y[2]);
  return !(y[0] == 1 && y[1] == 2 && y[2] == 3 && version == COMM_VERSION_CODE);
}
