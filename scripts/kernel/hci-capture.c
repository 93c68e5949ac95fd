/*
 * hci-capture: every packet the kernel's Bluetooth monitor channel carries (every adapter's HCI traffic, the user
 * channel's too, and the kernel's index and mgmt notes), written as it comes to a btsnoop file in the monitor
 * format (datalink 2001), the format `btmon -w` writes and `btmon -r` reads. Runs inside the kernel test guest
 * (scripts/kernel/guest); standard C and POSIX only, no decoding.
 *
 *   hci-capture FILE
 *
 * Why not `btmon -w`: btmon decodes every packet it writes, and BlueZ 5.66's btmon dies with SIGSEGV decoding the
 * GATT discovery of a database with an included secondary service (our heart-rate example's Battery service, included
 * by Heart Rate): after the Read By Type (Include) response naming it, the next Read By Type Request crashes it (found
 * by cutting a capture at each record: 783 records of one adapter's traffic crash it, 782 do not). In the guest it
 * died so about twice a run, its capture ending there. Decoding every packet under emulation also cost about a tenth
 * of an emulated CPU while bulk data crossed. This program writes without decoding, so the capture is whole;
 * `btmon -r` of it still stops at that packet, so read the rest with Wireshark, which reads the monitor format
 * (LINUX_MONITOR) too.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#define AF_BLUETOOTH_ 31
#define BTPROTO_HCI_ 1
#define HCI_DEV_NONE_ 0xffff
#define HCI_CHANNEL_MONITOR_ 2

struct sockaddr_hci_ {
    sa_family_t family;
    unsigned short dev;
    unsigned short channel;
};

static void be32(unsigned char *p, uint32_t v) { p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v; }

static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) { if (errno == EINTR) continue; return -1; }
        p += w; n -= (size_t)w;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: hci-capture FILE\n"); return 64; }
    int s = socket(AF_BLUETOOTH_, SOCK_RAW | SOCK_CLOEXEC, BTPROTO_HCI_);
    if (s < 0) { perror("hci-capture: socket"); return 1; }
    struct sockaddr_hci_ a = { AF_BLUETOOTH_, HCI_DEV_NONE_, HCI_CHANNEL_MONITOR_ };
    if (bind(s, (struct sockaddr *)&a, sizeof a) < 0) { perror("hci-capture: bind the monitor channel"); return 1; }
    int one = 1;
    setsockopt(s, SOL_SOCKET, SO_TIMESTAMP, &one, sizeof one);
    int out = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out < 0) { perror(argv[1]); return 1; }
    /* btsnoop: "btsnoop\0", version 1, datalink 2001 (Linux monitor), all big-endian. */
    unsigned char header[16] = { 'b', 't', 's', 'n', 'o', 'o', 'p', 0 };
    be32(header + 8, 1);
    be32(header + 12, 2001);
    if (write_all(out, header, sizeof header) < 0) { perror("hci-capture: write"); return 1; }
    static unsigned char buf[6 + 65536];
    for (;;) {
        char control[64];
        struct iovec iov = { buf, sizeof buf };
        struct msghdr msg = { 0 };
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        ssize_t n = recvmsg(s, &msg, 0);
        if (n < 0) { if (errno == EINTR) continue; perror("hci-capture: recvmsg"); return 1; }
        if (n < 6) continue;
        /* The monitor's header: opcode, index, length (little-endian), then the packet. */
        unsigned opcode = buf[0] | (buf[1] << 8), index = buf[2] | (buf[3] << 8), length = buf[4] | (buf[5] << 8);
        if ((size_t)n < 6 + (size_t)length) length = (unsigned)(n - 6);
        struct timeval tv = { 0, 0 };
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMP) memcpy(&tv, CMSG_DATA(c), sizeof tv);
        }
        if (tv.tv_sec == 0) gettimeofday(&tv, NULL);
        /* Microseconds since year 0, as BlueZ writes them: since 2000 plus 0x00E03AB44A676000. */
        uint64_t ts = (uint64_t)((int64_t)(tv.tv_sec - 946684800LL) * 1000000LL + tv.tv_usec) + 0x00E03AB44A676000ULL;
        unsigned char record[24];
        be32(record, length);
        be32(record + 4, length);
        be32(record + 8, (uint32_t)index << 16 | opcode);
        be32(record + 12, 0);
        be32(record + 16, (uint32_t)(ts >> 32));
        be32(record + 20, (uint32_t)ts);
        struct iovec w[2] = { { record, sizeof record }, { buf + 6, length } };
        size_t want = sizeof record + length;
        ssize_t done = writev(out, w, 2);
        if (done >= 0 && (size_t)done < want) {
            /* (A short write: the rest, in order.) */
            size_t k = (size_t)done;
            if (k < sizeof record) {
                if (write_all(out, record + k, sizeof record - k) < 0) done = -1;
                k = sizeof record;
            }
            if (done >= 0 && write_all(out, buf + 6 + (k - sizeof record), length - (k - sizeof record)) < 0) done = -1;
        }
        if (done < 0) { perror("hci-capture: write"); return 1; }
    }
}
