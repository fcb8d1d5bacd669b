// SPDX-License-Identifier: MIT
/* MLTCP over CUBIC: CUBIC (RFC 9438) as a BPF TCP congestion control, its window growth scaled by
 * MLTCP's aggressiveness F(bytes_ratio) (mltcp.h).
 *
 * CUBIC grows the window along W(t) = C (t - K)^3 + W_max after a reduction, K the time to regain
 * W_max, and never slower than a Reno flow would (the Reno-friendly estimate); on a loss W_max
 * becomes the window (less, with fast convergence, when it fell short of the last W_max) and the
 * window is cut to beta times it. Time runs in milliseconds; an epoch is shifted by the time the
 * connection sat idle, so the curve does not jump after a round's training. Unlike Linux's cubic
 * it has no HyStart: slow start runs until the first loss or ssthresh. MLTCP divides the ACKs a
 * window needs to grow by one packet by F: a flow further into its iteration climbs faster. */
#include "mltcp.h"

char _license[] SEC("license") = "Dual MIT/GPL";

#define CUBIC_BETA 717       /* beta = 0.7, in 1/1024 */
#define CUBIC_ALPHA 542      /* Reno-friendly growth 3 (1 - beta) / (1 + beta) = 0.53, in 1/1024 */
#define CUBIC_K_SCALE 2500000000ULL /* K in ms = cbrt((W_max - cwnd) / C x 10^9), C = 0.4 */
#define CUBIC_MAX_T_MS 100000       /* |t - K| beyond 100 s grows no further */

struct mltcp_cubic {
	struct mltcp_progress progress;
	__u32 credit;      /* slow start's growth owed, packets / 1000 */
	__u32 w_max;       /* the window before the last reduction */
	__u32 origin;      /* the curve's plateau this epoch */
	__u32 k_ms;        /* when this epoch regains origin */
	__u32 loss_cwnd;
	__u64 w_est;       /* the Reno-friendly window, in 1/2^20 packets */
	__u64 epoch_ms;    /* when this avoidance epoch began (0: none yet) */
	__u64 last_ack_ms; /* when the window last grew */
};

static __always_inline __u64 now_ms(void)
{
	return bpf_ktime_get_ns() / 1000000;
}

/* The integer cube root of a (a < 2^63), bit by bit from the top: 21 steps, unrolled (no loop
 * for the verifier to follow). */
static __always_inline __u32 cube_root(__u64 a)
{
	__u64 root = 0, bit;
	int i;

#pragma clang loop unroll(full)
	for (i = 20; i >= 0; i--) {
		bit = root | (1ULL << i);
		if (bit * bit * bit <= a)
			root = bit;
	}
	return root;
}

SEC("struct_ops/cubic_init")
void BPF_PROG(cubic_init, struct sock *sk)
{
	struct mltcp_cubic *ca = inet_csk_ca(sk);

	__builtin_memset(ca, 0, sizeof(*ca));
}

/* ACKs needed per packet of growth along the curve (before F). */
static __always_inline __u32 cubic_cnt(struct sock *sk, struct mltcp_cubic *ca, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	__u32 cwnd = tp->snd_cwnd, target, w_est;
	__u64 now = now_ms(), delta, t;
	__s64 d;

	if (!ca->epoch_ms) {
		ca->epoch_ms = now;
		if (cwnd < ca->w_max) {
			ca->k_ms = cube_root((__u64)(ca->w_max - cwnd) * CUBIC_K_SCALE);
			ca->origin = ca->w_max;
		} else {
			ca->k_ms = 0;
			ca->origin = cwnd;
		}
		ca->w_est = (__u64)cwnd << 20;
	}
	t = now - ca->epoch_ms + (tp->srtt_us >> 3) / 1000; /* W(t + RTT): where the window should be an RTT on */
	d = (__s64)t - ca->k_ms;
	if (d > CUBIC_MAX_T_MS)
		d = CUBIC_MAX_T_MS;
	if (d < -CUBIC_MAX_T_MS)
		d = -CUBIC_MAX_T_MS;
	delta = (__u64)(d < 0 ? -d : d);
	delta = 4 * delta * delta * delta / 10000000000ULL; /* C |t - K|^3, C = 0.4, t in ms */
	target = d < 0 ? (delta < ca->origin ? ca->origin - delta : 1) : ca->origin + delta;
	ca->w_est += ((__u64)CUBIC_ALPHA << 10) * acked / (cwnd > 0 ? cwnd : 1); /* alpha packets a window */
	w_est = ca->w_est >> 20;
	if (w_est > target)
		target = w_est;
	if (target > cwnd)
		return cwnd / (target - cwnd) > 1 ? cwnd / (target - cwnd) : 1;
	return 100 * cwnd; /* at or above the curve: barely grow */
}

SEC("struct_ops/cubic_cong_avoid")
void BPF_PROG(cubic_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct mltcp_cubic *ca = inet_csk_ca(sk);
	__u32 cnt, f, bin, before;

	if (!tcp_is_cwnd_limited(sk))
		return;
	ca->last_ack_ms = now_ms();
	if (tcp_in_slow_start(tp)) {
		acked = mltcp_slow_start(sk, &ca->progress, &ca->credit, acked);
		if (!acked)
			return;
	}
	cnt = cubic_cnt(sk, ca, acked);
	f = mltcp_aggressiveness(sk, &ca->progress, &bin);
	cnt = (__u64)cnt * MLTCP_ONE / (f > 0 ? f : 1);
	before = tp->snd_cwnd;
	tcp_cong_avoid_ai(tp, cnt > 0 ? cnt : 1, acked);
	mltcp_count(bin, f, acked, tp->snd_cwnd - before);
}

SEC("struct_ops/cubic_ssthresh")
__u32 BPF_PROG(cubic_ssthresh, struct sock *sk)
{
	struct mltcp_cubic *ca = inet_csk_ca(sk);
	__u32 cwnd = tcp_sk(sk)->snd_cwnd;

	ca->epoch_ms = 0;
	if (cwnd < ca->w_max) /* fast convergence: give way to flows still growing */
		ca->w_max = cwnd * (1024 + CUBIC_BETA) / 2048;
	else
		ca->w_max = cwnd;
	ca->loss_cwnd = cwnd;
	return cwnd * CUBIC_BETA / 1024 > 2 ? cwnd * CUBIC_BETA / 1024 : 2;
}

SEC("struct_ops/cubic_state")
void BPF_PROG(cubic_state, struct sock *sk, __u8 new_state)
{
	struct mltcp_cubic *ca = inet_csk_ca(sk);

	if (new_state == TCP_CA_Loss) {
		ca->epoch_ms = 0;
		ca->w_max = 0;
	}
}

/* Sending again after idling: shift the epoch by the idle time, so the curve resumes where it was. */
SEC("struct_ops/cubic_cwnd_event")
void BPF_PROG(cubic_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct mltcp_cubic *ca = inet_csk_ca(sk);
	__u64 now;

	if (ev != CA_EVENT_TX_START || !ca->epoch_ms || !ca->last_ack_ms)
		return;
	now = now_ms();
	if (now > ca->last_ack_ms) {
		ca->epoch_ms += now - ca->last_ack_ms;
		if (ca->epoch_ms > now)
			ca->epoch_ms = now;
	}
}

SEC("struct_ops/cubic_undo_cwnd")
__u32 BPF_PROG(cubic_undo_cwnd, struct sock *sk)
{
	const struct mltcp_cubic *ca = inet_csk_ca(sk);
	__u32 cwnd = tcp_sk(sk)->snd_cwnd;

	return cwnd > ca->loss_cwnd ? cwnd : ca->loss_cwnd;
}

SEC(".struct_ops")
struct tcp_congestion_ops mltcp_cubic = {
	.init = (void *)cubic_init,
	.ssthresh = (void *)cubic_ssthresh,
	.cong_avoid = (void *)cubic_cong_avoid,
	.set_state = (void *)cubic_state,
	.cwnd_event = (void *)cubic_cwnd_event,
	.undo_cwnd = (void *)cubic_undo_cwnd,
	.name = "fedmst_mltcpcub",
};
