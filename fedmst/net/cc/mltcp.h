/* MLTCP's part of fedmst's MLTCP congestion controls (mltcp.bpf.c over Reno, mltcp_cubic.bpf.c over
 * CUBIC), from Rajasekaran et al., "MLTCP: Congestion Control for DNN Training".
 *
 * The application tells each connection its iteration's bytes through the socket-storage map
 * iteration_bytes (key: the socket; value: struct mltcp_iteration); a new iteration number
 * restarts the count. The aggressiveness F(bytes_ratio) = slope * bytes_ratio + intercept, with
 * bytes_ratio the share of the iteration's bytes acknowledged so far, scales the window growth;
 * a connection told nothing gets F = 1. The paper scales the additive increase; with
 * MLTCP_IN_SLOW_START slow start's growth is scaled as well, since a model's transfer into a
 * deep queue may never leave slow start. mltcp_stats counts what was applied. */
#ifndef FEDMST_MLTCP_H
#define FEDMST_MLTCP_H

#include "fedmst_tcp.h"

/* Knobs given at build time (fedmst.net.congestion declares their defaults): F rises by
 * MLTCP_SLOPE over an iteration from MLTCP_INTERCEPT at its first byte (both in 1/1000), and
 * MLTCP_IN_SLOW_START (0 or 1) scales slow start's growth too. */
#if !defined(MLTCP_SLOPE) || !defined(MLTCP_INTERCEPT) || !defined(MLTCP_IN_SLOW_START)
#error "build with -DMLTCP_SLOPE=<x 1000> -DMLTCP_INTERCEPT=<x 1000> -DMLTCP_IN_SLOW_START=<0 or 1>"
#endif
#define MLTCP_ONE 1000U
#define MLTCP_BINS 10

/* What the application writes for a connection before each iteration's communication. */
struct mltcp_iteration {
	__u32 iteration;
	__u32 unused;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct mltcp_iteration);
} iteration_bytes SEC(".maps");

/* Per tenth of bytes_ratio, in congestion avoidance: the packets acknowledged, F (in 1/1000)
 * summed over them, and the packets the window grew by, so a run shows F(bytes_ratio) as the
 * kernel applied it. */
struct mltcp_bin {
	__u64 acked;
	__u64 aggressiveness;
	__u64 grown;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MLTCP_BINS);
	__type(key, __u32);
	__type(value, struct mltcp_bin);
} mltcp_stats SEC(".maps");

/* Where a connection is in its iteration (part of each algorithm's private state). */
struct mltcp_progress {
	__u32 iteration;
	__u32 has_iteration;
	__u64 acked_before; /* tp->bytes_acked when this iteration began */
};

/* F(bytes_ratio) in 1/1000 for this connection's iteration (1000 where it was told nothing);
 * *bin is the tenth of bytes_ratio it falls in (MLTCP_BINS where none). */
static __always_inline __u32 mltcp_aggressiveness(struct sock *sk, struct mltcp_progress *ca, __u32 *bin)
{
	struct mltcp_iteration *it;
	__u64 sent, ratio;

	*bin = MLTCP_BINS;
	it = bpf_sk_storage_get(&iteration_bytes, sk, 0, 0);
	if (!it || !it->bytes)
		return MLTCP_ONE;
	if (!ca->has_iteration || ca->iteration != it->iteration) {
		ca->iteration = it->iteration;
		ca->has_iteration = 1;
		ca->acked_before = tcp_sk(sk)->bytes_acked;
	}
	sent = tcp_sk(sk)->bytes_acked - ca->acked_before;
	ratio = sent >= it->bytes ? MLTCP_ONE : sent * MLTCP_ONE / it->bytes;
	*bin = ratio * MLTCP_BINS / MLTCP_ONE;
	if (*bin >= MLTCP_BINS)
		*bin = MLTCP_BINS - 1;
	return MLTCP_SLOPE * ratio / MLTCP_ONE + MLTCP_INTERCEPT;
}

static __always_inline void mltcp_count(__u32 bin, __u32 f, __u32 acked, __u32 grown)
{
	struct mltcp_bin *stats;

	if (bin >= MLTCP_BINS)
		return;
	stats = bpf_map_lookup_elem(&mltcp_stats, &bin);
	if (stats) {
		stats->acked += acked;
		stats->aggressiveness += (__u64)f * acked;
		stats->grown += grown;
	}
}

/* Slow start's growth of one packet per packet acknowledged, times F where MLTCP_IN_SLOW_START
 * (else the kernel's), up to ssthresh; returns the packets left over for congestion avoidance.
 * *credit holds growth owed, in packets / 1000. */
static __always_inline __u32 mltcp_slow_start(struct sock *sk, struct mltcp_progress *progress, __u32 *credit,
					      __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 f, bin, grow;

	if (!MLTCP_IN_SLOW_START)
		return tcp_slow_start(tp, acked);
	f = mltcp_aggressiveness(sk, progress, &bin);
	*credit += f * acked;
	grow = *credit / MLTCP_ONE;
	*credit -= grow * MLTCP_ONE;
	if (tp->snd_cwnd + grow > tp->snd_ssthresh)
		grow = tp->snd_ssthresh - tp->snd_cwnd;
	if (tp->snd_cwnd + grow > tp->snd_cwnd_clamp)
		grow = tp->snd_cwnd_clamp > tp->snd_cwnd ? tp->snd_cwnd_clamp - tp->snd_cwnd : 0;
	tp->snd_cwnd += grow;
	mltcp_count(bin, f, acked, grow);
	return 0;
}

#endif
