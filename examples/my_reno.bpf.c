// SPDX-License-Identifier: MIT
/* A template for a TCP congestion control of your own: TCP Reno (RFC 5681) written out in BPF, as
 * one tcp_congestion_ops in SEC(".struct_ops"). Copy it, change what it does, and run it:
 *
 *     fedmst run --congestion-control examples/my_reno.bpf.c
 *
 * fedmst compiles it with clang against a vmlinux.h generated from the running kernel's BTF (every
 * kernel type: struct sock, struct tcp_sock ...), registers it for the run under a name of its
 * own (its .name below is replaced) and unregisters it after. It calls no kernel function, so
 * every line of the algorithm is here to change; the kernel also exports its building blocks to
 * BPF (tcp_slow_start, tcp_cong_avoid_ai, tcp_reno_ssthresh ... declared `extern ... __ksym`, as
 * fedmst/net/cc/fedmst_tcp.h does).
 *
 * The kernel's verifier lets a BPF congestion control write only a few fields of a socket: among
 * them the tcp_sock's snd_cwnd, snd_cwnd_cnt, snd_ssthresh and ecn_flags, and the private area
 * where an algorithm keeps its own state (inet_connection_sock's icsk_ca_priv, 13 u64s on this
 * kernel; fedmst/net/cc/mltcp.bpf.c keeps its state there). It may read any field. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "Dual MIT/GPL";

/* struct tcp_sock begins with the inet_connection_sock that begins with the sock: a cast. */
static __always_inline struct tcp_sock *tcp_of(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline __u32 smaller(__u32 a, __u32 b)
{
	return a < b ? a : b;
}

/* Whether the window, not the application, limits the sender (include/net/tcp.h): only then does
 * growing it mean anything. */
static __always_inline int window_limited(const struct tcp_sock *tp)
{
	if (tp->snd_cwnd < tp->snd_ssthresh)
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return tp->is_cwnd_limited;
}

/* On each ACK of `acked` packets. Slow start: one packet more per packet acknowledged, up to
 * ssthresh. Congestion avoidance: one packet more per window of packets acknowledged, counted in
 * snd_cwnd_cnt. Never above the window's clamp. */
SEC("struct_ops/my_reno_cong_avoid")
void BPF_PROG(my_reno_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_of(sk);
	__u32 cwnd, grow;

	if (!window_limited(tp))
		return;
	if (tp->snd_cwnd < tp->snd_ssthresh) {
		cwnd = smaller(tp->snd_cwnd + acked, tp->snd_ssthresh);
		acked -= cwnd - tp->snd_cwnd;
		tp->snd_cwnd = smaller(cwnd, tp->snd_cwnd_clamp);
		if (!acked)
			return;
	}
	cwnd = tp->snd_cwnd ? tp->snd_cwnd : 1;
	tp->snd_cwnd_cnt += acked;
	if (tp->snd_cwnd_cnt >= cwnd) {
		grow = tp->snd_cwnd_cnt / cwnd;
		tp->snd_cwnd_cnt -= grow * cwnd;
		tp->snd_cwnd = smaller(tp->snd_cwnd + grow, tp->snd_cwnd_clamp);
	}
}

/* On a loss: the slow-start threshold the window falls back to, half the window (at least 2). */
SEC("struct_ops/my_reno_ssthresh")
__u32 BPF_PROG(my_reno_ssthresh, struct sock *sk)
{
	const struct tcp_sock *tp = tcp_of(sk);

	return tp->snd_cwnd / 2 > 2 ? tp->snd_cwnd / 2 : 2;
}

/* When a loss turns out spurious: the window it had before the cut. */
SEC("struct_ops/my_reno_undo_cwnd")
__u32 BPF_PROG(my_reno_undo_cwnd, struct sock *sk)
{
	const struct tcp_sock *tp = tcp_of(sk);

	return tp->snd_cwnd > tp->prior_cwnd ? tp->snd_cwnd : tp->prior_cwnd;
}

SEC(".struct_ops")
struct tcp_congestion_ops my_reno = {
	.cong_avoid = (void *)my_reno_cong_avoid,
	.ssthresh = (void *)my_reno_ssthresh,
	.undo_cwnd = (void *)my_reno_undo_cwnd,
	.name = "my_reno",
	/* .flags = TCP_CONG_NEEDS_ECN (0x2) negotiates ECN, and fedmst's links then mark it. */
};
