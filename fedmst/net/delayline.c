/* fedmst's delay line, compiled: the rules of DelayLine in delayline.py, at a few microseconds a packet.
 *
 * Why C: the Python line spends 15-42 us of CPU per packet (netfilterqueue calls back into Python for
 * every packet, and every verdict is its own system call); here packets are read many to a system call
 * (recvmmsg) and the packets due together are accepted by one batch verdict. The rules are the Python
 * class's, in the same order and with the same random numbers (CPython's Mersenne Twister, seeded as
 * random.Random(seed) seeds it), so a seeded run drops the same packets and holds each for the same time;
 * `fedmst-delay replay` plays a script of pushes and releases through the rules alone, which the tests
 * compare with the Python class.
 *
 *   fedmst-delay serve (NETNS|- QUEUE MAXLEN CAPACITY DELAY_S JITTER_S LOSS SEED STATS|- CONTROL|-)...
 *   fedmst-delay replay CAPACITY DELAY_S JITTER_S LOSS SEED
 *       (stdin: push T | release T | retune D|- L|- | aim AIM LATE | wait DUE_IN AIM | stats)
 *
 * Run by `python -m fedmst.net.delayline`, which checks the arguments and execs this. No fail-open: if it
 * dies, the kernel drops the queue's packets. Held packets are dropped, not passed, when it stops.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h> /* NF_ACCEPT, NF_DROP */

#define BATCH 64               /* packets read per system call */
#define MESSAGE_BYTES 2048     /* one packet's metadata (COPY_META: no payload) fits with room */
#define LINE_FIELDS 10         /* serve's arguments per line */
/* AIM_GAIN_LATER, AIM_GAIN_EARLIER, FIRST_AIM_S, MAX_AIM_S and MAX_POLL_S: delayline.py's, given by its build */
#if !defined(AIM_GAIN_LATER) || !defined(AIM_GAIN_EARLIER) || !defined(FIRST_AIM_S) || !defined(MAX_AIM_S) \
    || !defined(MAX_POLL_S)
#error "built by fedmst.net.delayline.build(), which passes the timer's rules (RULES) as -D flags"
#endif

/* CPython's random: MT19937, init_by_array over the seed's 32-bit words, 53-bit doubles ------------- */
typedef struct { uint32_t mt[624]; int i; } twister;

static void twister_seed(twister *t, uint64_t seed) {
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    size_t n = key[1] ? 2 : 1, i = 1, j = 0, k;
    t->mt[0] = 19650218U;
    for (int m = 1; m < 624; m++) t->mt[m] = 1812433253U * (t->mt[m - 1] ^ (t->mt[m - 1] >> 30)) + (uint32_t)m;
    for (k = 624 > n ? 624 : n; k; k--) {
        t->mt[i] = (t->mt[i] ^ ((t->mt[i - 1] ^ (t->mt[i - 1] >> 30)) * 1664525U)) + key[j] + (uint32_t)j;
        if (++i >= 624) { t->mt[0] = t->mt[623]; i = 1; }
        if (++j >= n) j = 0;
    }
    for (k = 623; k; k--) {
        t->mt[i] = (t->mt[i] ^ ((t->mt[i - 1] ^ (t->mt[i - 1] >> 30)) * 1566083941U)) - (uint32_t)i;
        if (++i >= 624) { t->mt[0] = t->mt[623]; i = 1; }
    }
    t->mt[0] = 0x80000000U;
    t->i = 624;
}

static uint32_t twister_next(twister *t) {
    static const uint32_t mag01[2] = {0, 0x9908b0dfU};
    if (t->i >= 624) {
        int k;
        uint32_t y;
        for (k = 0; k < 624 - 397; k++) {
            y = (t->mt[k] & 0x80000000U) | (t->mt[k + 1] & 0x7fffffffU);
            t->mt[k] = t->mt[k + 397] ^ (y >> 1) ^ mag01[y & 1];
        }
        for (; k < 623; k++) {
            y = (t->mt[k] & 0x80000000U) | (t->mt[k + 1] & 0x7fffffffU);
            t->mt[k] = t->mt[k + (397 - 624)] ^ (y >> 1) ^ mag01[y & 1];
        }
        y = (t->mt[623] & 0x80000000U) | (t->mt[0] & 0x7fffffffU);
        t->mt[623] = t->mt[396] ^ (y >> 1) ^ mag01[y & 1];
        t->i = 0;
    }
    uint32_t y = t->mt[t->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    return y ^ (y >> 18);
}

static double twister_random(twister *t) { /* random.random() */
    uint32_t a = twister_next(t) >> 5, b = twister_next(t) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

/* the rules: DelayLine ------------------------------------------------------------------------------ */
typedef struct {
    double delay_s, jitter_s, loss, last_due;
    uint32_t capacity, head, count;
    double *due;  /* a ring of `capacity` held packets, oldest at head */
    uint32_t *id;
    twister rng;
    uint64_t received, passed, lost, overflow;
    double error_sum_s, error_max_s;
} line;

enum outcome { KEPT, LOST, OVERFLOW };

static int line_init(line *l, uint32_t capacity, double delay_s, double jitter_s, double loss, uint64_t seed) {
    memset(l, 0, sizeof *l);
    l->delay_s = delay_s, l->jitter_s = jitter_s, l->loss = loss, l->capacity = capacity;
    l->last_due = -INFINITY;
    l->due = calloc(capacity, sizeof *l->due);
    l->id = calloc(capacity, sizeof *l->id);
    twister_seed(&l->rng, seed);
    return l->due && l->id ? 0 : -1;
}

static enum outcome line_push(line *l, uint32_t id, double now) {
    l->received++;
    if (l->loss != 0.0 && twister_random(&l->rng) < l->loss) { l->lost++; return LOST; }
    if (l->count >= l->capacity) { l->overflow++; return OVERFLOW; }
    double wait = l->delay_s;
    if (l->jitter_s != 0.0) { /* random.uniform(-j, j) = -j + (j - -j) * random() */
        double jittered = wait + (-l->jitter_s + (l->jitter_s - -l->jitter_s) * twister_random(&l->rng));
        wait = jittered > 0.0 ? jittered : 0.0;
    }
    double due = now + wait;
    if (l->last_due >= due) due = l->last_due; /* Python's max(last, due) keeps the first of equals */
    l->last_due = due;
    uint32_t at = (l->head + l->count++) % l->capacity;
    l->due[at] = due, l->id[at] = id;
    return KEPT;
}

static int line_next_due(const line *l, double *due) {
    if (!l->count) return 0;
    *due = l->due[l->head];
    return 1;
}

/* Releases every packet due by now, never earlier; returns how many, the newest one's id in *last. */
static uint32_t line_release(line *l, double now, uint32_t *last) {
    uint32_t n = 0;
    while (l->count && l->due[l->head] <= now) {
        double error = now - l->due[l->head];
        *last = l->id[l->head];
        l->head = (l->head + 1) % l->capacity, l->count--, n++;
        l->error_sum_s += error;
        if (error > l->error_max_s) l->error_max_s = error;
    }
    l->passed += n;
    return n;
}

static int line_retune(line *l, const double *delay_s, const double *loss) {
    if (delay_s && !(*delay_s >= 0)) { fprintf(stderr, "fedmst-delay: delay must be >= 0 s, got %g\n", *delay_s); return -1; }
    if (loss && !(*loss >= 0 && *loss <= 1)) {
        fprintf(stderr, "fedmst-delay: loss must be a probability in [0, 1], got %g\n", *loss);
        return -1;
    }
    if (delay_s) l->delay_s = *delay_s;
    if (loss) l->loss = *loss;
    return 0;
}

/* JSON numbers as Python writes them: floats keep a point, so readers see the same types */
static void put_float(FILE *f, const char *key, double v) {
    char s[40];
    snprintf(s, sizeof s, "%.17g", v);
    fprintf(f, ",\n \"%s\": %s%s", key, s, strpbrk(s, ".en") ? "" : ".0");
}

static void put_stats(FILE *f, const line *l) {
    fprintf(f, " \"implementation\": \"compiled\"");
    put_float(f, "delay_s", l->delay_s), put_float(f, "jitter_s", l->jitter_s), put_float(f, "loss", l->loss);
    fprintf(f, ",\n \"capacity\": %u,\n \"received\": %llu,\n \"passed\": %llu,\n \"lost\": %llu,\n \"overflow\": %llu,"
            "\n \"held\": %u", l->capacity, (unsigned long long)l->received, (unsigned long long)l->passed,
            (unsigned long long)l->lost, (unsigned long long)l->overflow, l->count);
    put_float(f, "release_error_mean_s", l->passed ? l->error_sum_s / (double)l->passed : 0.0);
    put_float(f, "release_error_max_s", l->error_max_s);
}

/* delayline.py's aim_after: how early the next timer is aimed, after one that came `late` */
static double aim_after(double aim, double late) {
    late = late < 0.0 ? 0.0 : late > MAX_AIM_S ? MAX_AIM_S : late;
    return aim + (late - aim) * (late >= aim ? AIM_GAIN_LATER : AIM_GAIN_EARLIER);
}

/* delayline.py's wait_before: how long to sleep (0: poll) for a packet due in `due_in` */
static double wait_before(double due_in, double aim) {
    if (due_in > aim) return due_in - aim;
    return due_in > MAX_POLL_S ? due_in : 0.0;
}

/* replay: the rules alone, driven by a script on stdin (the tests' comparison with DelayLine) --------- */
static int replay(line *l) {
    char word[16], a[64], b[64];
    while (scanf("%15s", word) == 1) {
        if (!strcmp(word, "push") && scanf("%63s", a) == 1) {
            enum outcome o = line_push(l, (uint32_t)l->received, strtod(a, NULL));
            if (o == KEPT) printf("kept %.17g\n", l->last_due);
            else printf(o == LOST ? "lost\n" : "overflow\n");
        } else if (!strcmp(word, "release") && scanf("%63s", a) == 1) {
            uint32_t last = 0, n = line_release(l, strtod(a, NULL), &last);
            printf("released %u %u\n", n, n ? last : 0);
        } else if (!strcmp(word, "retune") && scanf("%63s %63s", a, b) == 2) {
            double d = strtod(a, NULL), p = strtod(b, NULL);
            if (line_retune(l, strcmp(a, "-") ? &d : NULL, strcmp(b, "-") ? &p : NULL)) return 1;
        } else if (!strcmp(word, "aim") && scanf("%63s %63s", a, b) == 2) {
            printf("aim %.17g\n", aim_after(strtod(a, NULL), strtod(b, NULL)));
        } else if (!strcmp(word, "wait") && scanf("%63s %63s", a, b) == 2) {
            printf("wait %.17g\n", wait_before(strtod(a, NULL), strtod(b, NULL)));
        } else if (!strcmp(word, "stats")) {
            printf("{\n"), put_stats(stdout, l), printf("\n}\n");
        } else {
            fprintf(stderr, "fedmst-delay replay: bad command %s\n", word);
            return 2;
        }
        fflush(stdout);
    }
    return 0;
}

/* serve: the NFQUEUE process, for one or many lines ------------------------------------------------- */
/* One process serves many lines (each link direction's queue, in its receiving host's namespace): a
 * timer wake-up costs far more CPU than the work of releasing a packet (about 25 us on a virtual
 * machine, against a few), and the packets of all its lines that fall due together share one. */
typedef struct {
    line line;
    struct nfq_handle *handle;
    struct nfq_q_handle *queue;
    int fd, netns;
    unsigned number, maxlen;
    const char *stats, *control;
    double lag_sum_s;
    uint64_t stamped, verdicts;
} served;

typedef struct {
    uint64_t wakeups, timer_wakeups;
    size_t lines;
} process_counts;

static double monotonic_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* One packet: its delay starts when it reached the interface (the kernel's receive stamp), not when it
 * was read: our wake-up latency is not link delay. Lost and overflowing packets are dropped at once. */
static int on_packet(struct nfq_q_handle *queue, struct nfgenmsg *msg, struct nfq_data *data, void *arg) {
    (void)msg;
    served *s = arg;
    struct nfqnl_msg_packet_hdr *header = nfq_get_msg_packet_hdr(data);
    if (!header) return 0;
    uint32_t id = ntohl(header->packet_id);
    struct timeval stamp;
    double behind = 0.0;
    if (nfq_get_timestamp(data, &stamp) == 0 && (stamp.tv_sec || stamp.tv_usec)) {
        struct timespec wall; /* in whole ns: a double of seconds since 1970 is coarser than the stamp */
        clock_gettime(CLOCK_REALTIME, &wall);
        long long ns = ((long long)wall.tv_sec - stamp.tv_sec) * 1000000000LL + wall.tv_nsec
                       - ((long long)stamp.tv_usec + 1) * 1000LL; /* the stamp's end: it is truncated to the us */
        behind = (double)ns * 1e-9;
    }
    double now = monotonic_s(); /* read after the wall clock: the gap between them only delays more */
    if (behind > 0.0 && behind < 1.0) /* a stamp from a stepped wall clock is not believed */
        now -= behind, s->lag_sum_s += behind, s->stamped++;
    if (line_push(&s->line, id, now) != KEPT) nfq_set_verdict(queue, id, NF_DROP, 0, NULL);
    return 0;
}

/* Reads what has arrived, up to a few batches, without blocking; -1 on a socket error. */
static int read_packets(served *s) {
    static char buffers[BATCH][MESSAGE_BYTES];
    struct mmsghdr messages[BATCH];
    struct iovec vectors[BATCH];
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < BATCH; i++) {
            vectors[i] = (struct iovec){buffers[i], MESSAGE_BYTES};
            messages[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &vectors[i], .msg_iovlen = 1}};
        }
        int n = recvmmsg(s->fd, messages, BATCH, MSG_DONTWAIT, NULL);
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ENOBUFS ? 0 : -1;
        for (int i = 0; i < n; i++) nfq_handle_packet(s->handle, buffers[i], (int)messages[i].msg_len);
        if (n < BATCH) break;
    }
    return 0;
}

/* {"delay_ms": D|null, "loss": P|null}, as link.py writes it (whole, by a rename); none there: no change */
static int read_control(const char *path, line *l) {
    char text[512] = {0};
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 0;
        fprintf(stderr, "fedmst-delay: cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[got] = 0;
    double values[2];
    int given[2] = {0, 0};
    const char *keys[2] = {"\"delay_ms\"", "\"loss\""};
    for (int k = 0; k < 2; k++) {
        char *at = strstr(text, keys[k]);
        if (!at || !(at = strchr(at, ':'))) continue;
        at += strspn(at + 1, " ") + 1;
        if (strncmp(at, "null", 4)) given[k] = 1, values[k] = strtod(at, NULL);
    }
    double delay_s = values[0] / 1e3;
    return line_retune(l, given[0] ? &delay_s : NULL, given[1] ? &values[1] : NULL);
}

/* The kernel's own counters of the queue, in this thread's namespace (drops we never saw). */
static void kernel_queue_stats(FILE *f, unsigned queue) {
    FILE *table = fopen("/proc/thread-self/net/netfilter/nfnetlink_queue", "r");
    unsigned q, pid, mode, range, waiting, dropped, user_dropped;
    if (!table) return;
    while (fscanf(table, "%u %u %u %u %u %u %u %*[^\n]", &q, &pid, &waiting, &mode, &range, &dropped,
                  &user_dropped) == 7) {
        if (q == queue) {
            fprintf(f, ",\n \"kernel_queue_dropped\": %u,\n \"kernel_user_dropped\": %u", dropped, user_dropped);
            break;
        }
    }
    fclose(table);
}

static void write_stats(served *s, const process_counts *p, uint32_t dropped_at_exit) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", s->stats);
    FILE *f = fopen(tmp, "w");
    if (!f) { fprintf(stderr, "fedmst-delay: cannot write %s: %s\n", tmp, strerror(errno)); return; }
    fprintf(f, "{\n \"queue\": %u,\n", s->number);
    put_stats(f, &s->line);
    fprintf(f, ",\n \"dropped_at_exit\": %u,\n \"read_lag_mean_s\": ", dropped_at_exit);
    if (s->stamped) fprintf(f, "%.17g", s->lag_sum_s / (double)s->stamped);
    else fprintf(f, "null");
    fprintf(f, ",\n \"stamped\": %llu,\n \"verdicts\": %llu,\n \"process_lines\": %zu,\n \"process_wakeups\": %llu,"
            "\n \"process_timer_wakeups\": %llu", (unsigned long long)s->stamped, (unsigned long long)s->verdicts,
            p->lines, (unsigned long long)p->wakeups, (unsigned long long)p->timer_wakeups);
    if (s->netns < 0 || setns(s->netns, CLONE_NEWNET) == 0) kernel_queue_stats(f, s->number);
    fprintf(f, "\n}\n");
    fclose(f);
    rename(tmp, s->stats);
}

/* Releases each packet when due, never earlier, until SIGTERM or SIGINT. The timer is aimed early by what
 * its wake-ups' lateness has been (aim_after); a wake-up before the due time sleeps or polls until it
 * (wait_before). */
static int serve_loop(served *lines, process_counts *p, struct pollfd *polled, int signals) {
    size_t n = p->lines;
    double aim = FIRST_AIM_S; /* learned from then on */
    for (size_t i = 0; i < n; i++) polled[i] = (struct pollfd){lines[i].fd, POLLIN, 0};
    polled[n] = (struct pollfd){signals, POLLIN, 0};
    for (;;) {
        double due, earliest = INFINITY, now = monotonic_s(), timeout = -1;
        for (size_t i = 0; i < n; i++)
            if (line_next_due(&lines[i].line, &due) && due < earliest) earliest = due;
        if (earliest < INFINITY) timeout = wait_before(earliest - now, aim);
        struct timespec wait = {(time_t)timeout, (long)((timeout - (double)(time_t)timeout) * 1e9)};
        int ready = ppoll(polled, n + 1, timeout < 0 ? NULL : &wait, NULL);
        if (ready < 0 && errno != EINTR) { perror("fedmst-delay: ppoll"); return 1; }
        if (timeout != 0) p->wakeups++; /* a poll is not a wake-up */
        if (ready == 0 && timeout > 0) p->timer_wakeups++, aim = aim_after(aim, monotonic_s() - now - timeout);
        for (size_t i = 0; ready > 0 && i < n; i++) {
            if ((polled[i].revents & POLLIN) && read_packets(&lines[i])) {
                perror("fedmst-delay: reading a queue");
                return 1;
            }
        }
        double woke = monotonic_s();
        for (size_t i = 0; i < n; i++) {
            uint32_t last, released = line_release(&lines[i].line, woke, &last);
            if (released) nfq_set_verdict_batch(lines[i].queue, last, NF_ACCEPT), lines[i].verdicts++;
        }
        if (ready > 0 && (polled[n].revents & POLLIN)) {
            struct signalfd_siginfo info;
            while (read(signals, &info, sizeof info) == sizeof info) {
                if (info.ssi_signo != SIGUSR1) return 0;
                for (size_t i = 0; i < n; i++) /* each line's file holds its latest change */
                    if (strcmp(lines[i].control, "-") && read_control(lines[i].control, &lines[i].line)) return 1;
            }
        }
    }
}

/* Binds one line's queue in its namespace (NETNS: a /proc/PID/ns/net path, or - for our own). */
static int bind_line(served *s, char **field) {
    const char *netns = field[0];
    s->number = (unsigned)strtoul(field[1], NULL, 10), s->maxlen = (unsigned)strtoul(field[2], NULL, 10);
    s->stats = field[8], s->control = field[9], s->netns = -1;
    if (line_init(&s->line, (uint32_t)strtoul(field[3], NULL, 10), strtod(field[4], NULL), strtod(field[5], NULL),
                  strtod(field[6], NULL), strtoull(field[7], NULL, 10))) {
        fprintf(stderr, "fedmst-delay: out of memory\n");
        return -1;
    }
    if (strcmp(netns, "-") && ((s->netns = open(netns, O_RDONLY | O_CLOEXEC)) < 0 || setns(s->netns, CLONE_NEWNET))) {
        fprintf(stderr, "fedmst-delay: cannot enter the network namespace %s: %s\n", netns, strerror(errno));
        return -1;
    }
    int on = 1;
    s->handle = nfq_open(); /* its socket lives in the namespace it was made in */
    s->queue = s->handle ? nfq_create_queue(s->handle, (uint16_t)s->number, on_packet, s) : NULL;
    if (!s->queue || nfq_set_mode(s->queue, NFQNL_COPY_META, 0) < 0 || nfq_set_queue_maxlen(s->queue, s->maxlen) < 0) {
        fprintf(stderr, "fedmst-delay: cannot bind NFQUEUE %u (%s); need root, and no other process may hold "
                "that queue in this network namespace\n", s->number, strerror(errno));
        return -1;
    }
    nfnl_rcvbufsiz(nfq_nfnlh(s->handle), 8u << 20);
    s->fd = nfq_fd(s->handle);
    setsockopt(s->fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &on, sizeof on);
    return 0;
}

static int serve(int count, char **fields) {
    size_t n = (size_t)count / LINE_FIELDS;
    served *lines = calloc(n, sizeof *lines);
    struct pollfd *polled = calloc(n + 1, sizeof *polled);
    process_counts p = {0, 0, n};
    int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC), rc = 1;
    prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0); /* 1 ns instead of 50 us: the poll timeouts are release times */
    sigset_t mask;
    sigemptyset(&mask), sigaddset(&mask, SIGTERM), sigaddset(&mask, SIGINT), sigaddset(&mask, SIGUSR1);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int signals = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    /* a socket asking for receive stamps makes the kernel stamp every packet, which NFQUEUE passes on */
    int stamps = socket(AF_INET, SOCK_DGRAM, 0), on = 1;
    if (stamps >= 0) setsockopt(stamps, SOL_SOCKET, SO_TIMESTAMP, &on, sizeof on);
    size_t bound = 0;
    if (!lines || !polled || home < 0) { fprintf(stderr, "fedmst-delay: cannot start: %s\n", strerror(errno)); return 1; }
    while (bound < n && bind_line(&lines[bound], fields + bound * LINE_FIELDS) == 0) bound++;
    if (bound == n && setns(home, CLONE_NEWNET) == 0) rc = serve_loop(lines, &p, polled, signals);
    for (size_t i = 0; i < bound; i++) {
        /* held packets are dropped, not passed early: stopping must never look like "no delay" */
        served *s = &lines[i];
        uint32_t held = s->line.count;
        if (held) nfq_set_verdict_batch(s->queue, s->line.id[(s->line.head + held - 1) % s->line.capacity], NF_DROP);
        s->line.count = 0;
        if (strcmp(s->stats, "-")) write_stats(s, &p, held);
        nfq_destroy_queue(s->queue);
        nfq_close(s->handle);
    }
    return rc;
}

int main(int argc, char **argv) {
    if (argc >= 2 + LINE_FIELDS && (argc - 2) % LINE_FIELDS == 0 && !strcmp(argv[1], "serve"))
        return serve(argc - 2, argv + 2);
    if (argc == 7 && !strcmp(argv[1], "replay")) {
        line l;
        if (line_init(&l, (uint32_t)strtoul(argv[2], NULL, 10), strtod(argv[3], NULL), strtod(argv[4], NULL),
                      strtod(argv[5], NULL), strtoull(argv[6], NULL, 10)))
            return 1;
        return replay(&l);
    }
    fprintf(stderr, "usage: fedmst-delay serve (NETNS|- QUEUE MAXLEN CAPACITY DELAY_S JITTER_S LOSS SEED STATS|- "
                    "CONTROL|-)...\n       fedmst-delay replay CAPACITY DELAY_S JITTER_S LOSS SEED\n");
    return 2;
}
