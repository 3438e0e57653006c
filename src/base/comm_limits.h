/* Limits shared by every layer. */
#ifndef COMM_COMM_LIMITS_H_
#define COMM_COMM_LIMITS_H_

#define COMM_MAX_CHANNELS 32 /* channels of a communicator */
#define COMM_HOSTNAME_MAX 64 /* bytes of a host name exchanged at init */

/* The peer a schedule step names for the channel's collnet group (src/sched/schedule.h says what it means). */
#define COMM_PEER_COLLNET (-2)

#endif
