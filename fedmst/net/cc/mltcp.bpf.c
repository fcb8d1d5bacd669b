// SPDX-License-Identifier: MIT
/* MLTCP over Reno (Rajasekaran et al., "MLTCP: Congestion Control for DNN Training"), as a BPF TCP
 * congestion control.
 *
 * A training job's flows send the same bytes every iteration. MLTCP scales each flow's window
 * increase by an aggressiveness F(bytes_ratio) = slope * bytes_ratio + intercept, where
 * bytes_ratio is the share of this iteration's bytes the flow has sent (acknowledged) so far: a
 * flow near the end of its iteration's communication grows faster than one just starting, so it
 * finishes first, and competing jobs drift apart into an interleaved schedule with no scheduler.
 *
 * The application tells each connection its iteration's bytes through the socket-storage map
 * iteration_bytes (key: the socket; value: struct mltcp_iteration); a new iteration number
 * restarts the count. A connection told nothing grows as Reno does (F = 1). The window cut and
 * undo are Reno's. The paper scales the additive increase; with MLTCP_IN_SLOW_START slow start's
 * growth is scaled as well, since a model's transfer into a deep queue may never leave it. */
#include "fedmst_tcp.h"

char _license[] SEC("license") = "Dual MIT/GPL";

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

struct mltcp {
	__u32 iteration;
	__u32 has_iteration;
	__u64 acked_before; /* tp->bytes_acked when this iteration began */
	__u32 credit;       /* window growth owed, in packets / 1000 (of a window, in avoidance) */
};

SEC("struct_ops/mltcp_init")
void BPF_PROG(mltcp_init, struct sock *sk)
{
	struct mltcp *ca = inet_csk_ca(sk);

	ca->iteration = 0;
	ca->has_iteration = 0;
	ca->acked_before = 0;
	ca->credit = 0;
}

/* F(bytes_ratio) in 1/1000 for this connection's iteration (1000 where it was told nothing);
 * *bin is the tenth of bytes_ratio it falls in (MLTCP_BINS where none). */
static __always_inline __u32 mltcp_aggressiveness(struct sock *sk, struct mltcp *ca, __u32 *bin)
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

/* Reno's growth, times F: in congestion avoidance one packet per window of ACKs becomes F
 * packets; in slow start (where MLTCP_IN_SLOW_START) one packet per ACKed packet becomes F. */
SEC("struct_ops/mltcp_cong_avoid")
void BPF_PROG(mltcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mltcp *ca = inet_csk_ca(sk);
	__u32 f, bin, per, grow;

	if (!tcp_is_cwnd_limited(sk))
		return;
	if (tcp_in_slow_start(tp) && !MLTCP_IN_SLOW_START) {
		acked = tcp_slow_start(tp, acked);
		if (!acked)
			return;
	}
	f = mltcp_aggressiveness(sk, ca, &bin);
	per = tcp_in_slow_start(tp) ? 1 : (tp->snd_cwnd > 1 ? tp->snd_cwnd : 1);
	ca->credit += f * acked;
	grow = ca->credit / (per * MLTCP_ONE);
	ca->credit -= grow * per * MLTCP_ONE;
	if (tcp_in_slow_start(tp) && tp->snd_cwnd + grow > tp->snd_ssthresh)
		grow = tp->snd_ssthresh - tp->snd_cwnd;
	if (tp->snd_cwnd + grow > tp->snd_cwnd_clamp)
		grow = tp->snd_cwnd_clamp > tp->snd_cwnd ? tp->snd_cwnd_clamp - tp->snd_cwnd : 0;
	tp->snd_cwnd += grow;
	mltcp_count(bin, f, acked, grow);
}

SEC("struct_ops/mltcp_ssthresh")
__u32 BPF_PROG(mltcp_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops/mltcp_undo_cwnd")
__u32 BPF_PROG(mltcp_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops mltcp = {
	.init = (void *)mltcp_init,
	.ssthresh = (void *)mltcp_ssthresh,
	.cong_avoid = (void *)mltcp_cong_avoid,
	.undo_cwnd = (void *)mltcp_undo_cwnd,
	.name = "fedmst_mltcp",
};
