// SPDX-License-Identifier: MIT
/* DCTCP (RFC 8257) as a BPF TCP congestion control, for kernels built without tcp_dctcp.
 *
 * The sender keeps alpha, a moving average (gain g = 1/2^DCTCP_G_SHIFT) of the fraction of its
 * bytes that came back marked CE, updated once per window of data; on a mark it cuts the window
 * by alpha/2 instead of Reno's half, so it backs off in proportion to how congested the queue is
 * and keeps the queue near the marking threshold K. The receiver echoes CE exactly: an ACK is sent
 * at once whenever the CE state of arriving packets changes (RFC 8257 section 3.2). Growth is
 * Reno's. */
#include "fedmst_tcp.h"

char _license[] SEC("license") = "Dual MIT/GPL";

/* alpha's gain g = 1/2^DCTCP_G_SHIFT, given at build time (fedmst.net.congestion declares its
 * default, 4: the RFC's recommended 1/16). */
#ifndef DCTCP_G_SHIFT
#error "build with -DDCTCP_G_SHIFT=<shift>"
#endif
#define DCTCP_MAX_ALPHA 1024U /* alpha in 1/1024 */

struct dctcp {
	__u32 old_delivered;
	__u32 old_delivered_ce;
	__u32 prior_rcv_nxt;
	__u32 alpha;
	__u32 next_seq;
	__u32 ce_state;
	__u32 loss_cwnd;
};

static __always_inline void dctcp_new_window(const struct tcp_sock *tp, struct dctcp *ca)
{
	ca->next_seq = tp->snd_nxt;
	ca->old_delivered = tp->delivered;
	ca->old_delivered_ce = tp->delivered_ce;
}

SEC("struct_ops/dctcp_init")
void BPF_PROG(dctcp_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp *ca = inet_csk_ca(sk);

	ca->prior_rcv_nxt = tp->rcv_nxt;
	ca->alpha = DCTCP_MAX_ALPHA; /* start cautious: the first mark halves, as Reno would */
	ca->loss_cwnd = 0;
	ca->ce_state = 0;
	dctcp_new_window(tp, ca);
}

SEC("struct_ops/dctcp_ssthresh")
__u32 BPF_PROG(dctcp_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp *ca = inet_csk_ca(sk);
	__u32 cwnd = tp->snd_cwnd;
	__u32 cut = (cwnd * ca->alpha) >> 11; /* cwnd * alpha / 2 */

	ca->loss_cwnd = cwnd;
	return cwnd - cut > 2 ? cwnd - cut : 2;
}

/* Once a window of data is acknowledged: alpha = (1 - g) alpha + g F, F the fraction marked. */
SEC("struct_ops/dctcp_in_ack_event")
void BPF_PROG(dctcp_in_ack_event, struct sock *sk, __u32 flags)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp *ca = inet_csk_ca(sk);
	__u32 delivered, delivered_ce, alpha;

	if (before(tp->snd_una, ca->next_seq))
		return;
	delivered = tp->delivered - ca->old_delivered;
	delivered_ce = tp->delivered_ce - ca->old_delivered_ce;
	alpha = ca->alpha;
	alpha -= alpha >> DCTCP_G_SHIFT ? alpha >> DCTCP_G_SHIFT : alpha;
	if (delivered_ce) {
		delivered_ce <<= 10 - DCTCP_G_SHIFT;
		delivered_ce /= delivered > 1 ? delivered : 1;
		alpha = alpha + delivered_ce < DCTCP_MAX_ALPHA ? alpha + delivered_ce : DCTCP_MAX_ALPHA;
	}
	ca->alpha = alpha;
	dctcp_new_window(tp, ca);
}

/* A loss is still a loss: halve, as Reno does. */
static __always_inline void dctcp_react_to_loss(struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct dctcp *ca = inet_csk_ca(sk);

	ca->loss_cwnd = tp->snd_cwnd;
	tp->snd_ssthresh = tp->snd_cwnd >> 1 > 2 ? tp->snd_cwnd >> 1 : 2;
}

SEC("struct_ops/dctcp_state")
void BPF_PROG(dctcp_state, struct sock *sk, __u8 new_state)
{
	if (new_state == TCP_CA_Recovery && new_state != inet_csk(sk)->icsk_ca_state)
		dctcp_react_to_loss(sk);
}

static __always_inline void dctcp_ece_ack_cwr(struct sock *sk, __u32 ce_state)
{
	struct tcp_sock *tp = tcp_sk(sk);

	if (ce_state)
		tp->ecn_flags |= TCP_ECN_DEMAND_CWR;
	else
		tp->ecn_flags &= ~TCP_ECN_DEMAND_CWR;
}

/* The receiver: when the CE state of arriving data changes, first acknowledge what came before
 * with the old state (if an ACK was being delayed), then acknowledge at once with the new one. */
SEC("struct_ops/dctcp_cwnd_event")
void BPF_PROG(dctcp_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct dctcp *ca = inet_csk_ca(sk);
	__u32 new_ce_state;

	if (ev == CA_EVENT_LOSS) {
		dctcp_react_to_loss(sk);
		return;
	}
	if (ev != CA_EVENT_ECN_IS_CE && ev != CA_EVENT_ECN_NO_CE)
		return;
	new_ce_state = ev == CA_EVENT_ECN_IS_CE;
	if (ca->ce_state != new_ce_state) {
		if (inet_csk(sk)->icsk_ack.pending & ICSK_ACK_TIMER) {
			dctcp_ece_ack_cwr(sk, ca->ce_state);
			bpf_tcp_send_ack(sk, ca->prior_rcv_nxt);
		}
		inet_csk(sk)->icsk_ack.pending |= ICSK_ACK_NOW;
	}
	ca->prior_rcv_nxt = tcp_sk(sk)->rcv_nxt;
	ca->ce_state = new_ce_state;
	dctcp_ece_ack_cwr(sk, new_ce_state);
}

SEC("struct_ops/dctcp_cong_avoid")
void BPF_PROG(dctcp_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC("struct_ops/dctcp_undo_cwnd")
__u32 BPF_PROG(dctcp_undo_cwnd, struct sock *sk)
{
	const struct dctcp *ca = inet_csk_ca(sk);
	__u32 cwnd = tcp_sk(sk)->snd_cwnd;

	return cwnd > ca->loss_cwnd ? cwnd : ca->loss_cwnd;
}

SEC(".struct_ops")
struct tcp_congestion_ops dctcp = {
	.init = (void *)dctcp_init,
	.in_ack_event = (void *)dctcp_in_ack_event,
	.cwnd_event = (void *)dctcp_cwnd_event,
	.ssthresh = (void *)dctcp_ssthresh,
	.cong_avoid = (void *)dctcp_cong_avoid,
	.undo_cwnd = (void *)dctcp_undo_cwnd,
	.set_state = (void *)dctcp_state,
	.flags = TCP_CONG_NEEDS_ECN,
	.name = "fedmst_dctcp",
};
