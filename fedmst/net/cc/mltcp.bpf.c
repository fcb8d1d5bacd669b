// SPDX-License-Identifier: MIT
/* MLTCP over Reno (Rajasekaran et al., "MLTCP: Congestion Control for DNN Training"), as a BPF TCP
 * congestion control, as the paper first built it.
 *
 * A training job's flows send the same bytes every iteration. MLTCP scales each flow's window
 * increase by an aggressiveness F(bytes_ratio) = slope * bytes_ratio + intercept, where
 * bytes_ratio is the share of this iteration's bytes the flow has sent (acknowledged) so far: a
 * flow near the end of its iteration's communication grows faster than one just starting, so it
 * finishes first, and competing jobs drift apart into an interleaved schedule with no scheduler
 * (mltcp.h). The window cut and undo are Reno's. */
#include "mltcp.h"

char _license[] SEC("license") = "Dual MIT/GPL";

struct mltcp {
	struct mltcp_progress progress;
	__u32 credit; /* window growth owed, in packets / 1000 (of a window, in avoidance) */
};

SEC("struct_ops/mltcp_init")
void BPF_PROG(mltcp_init, struct sock *sk)
{
	struct mltcp *ca = inet_csk_ca(sk);

	ca->progress.iteration = 0;
	ca->progress.has_iteration = 0;
	ca->progress.acked_before = 0;
	ca->credit = 0;
}

/* Reno's growth, times F: in congestion avoidance one packet per window of ACKs becomes F
 * packets; slow start's, see mltcp_slow_start. */
SEC("struct_ops/mltcp_cong_avoid")
void BPF_PROG(mltcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mltcp *ca = inet_csk_ca(sk);
	__u32 f, bin, cwnd, grow;

	if (!tcp_is_cwnd_limited(sk))
		return;
	if (tcp_in_slow_start(tp)) {
		acked = mltcp_slow_start(sk, &ca->progress, &ca->credit, acked);
		if (!acked)
			return;
	}
	f = mltcp_aggressiveness(sk, &ca->progress, &bin);
	cwnd = tp->snd_cwnd > 1 ? tp->snd_cwnd : 1;
	ca->credit += f * acked;
	grow = ca->credit / (cwnd * MLTCP_ONE);
	ca->credit -= grow * cwnd * MLTCP_ONE;
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
