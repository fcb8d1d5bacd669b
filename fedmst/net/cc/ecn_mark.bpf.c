// SPDX-License-Identifier: MIT
/* ECN marking at a link's sender, for kernels without an ECN-marking qdisc (red, fq_codel).
 *
 * Attached to a link direction's egress (tc clsact), in front of the htb class that serialises
 * the link, it keeps a virtual queue that drains at the link's rate (LINK_BYTES_PER_S) and grows
 * by every packet the sender offers: the backlog an htb queue of that rate holds. A packet that
 * finds more than ECN_K_BYTES queued is marked CE, as DCTCP's switches mark on the instantaneous
 * queue. Only ECN-capable packets can be marked; the others pass untouched. It counts what it
 * saw, so a run reports the marks on every link. Packets are counted as the link carries them:
 * a GSO packet as its segments. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define TC_ACT_OK 0
#define NS_PER_S 1000000000ULL

char _license[] SEC("license") = "Dual MIT/GPL";

#ifndef LINK_BYTES_PER_S
#error "build with -DLINK_BYTES_PER_S=<the link's rate in bytes per second>"
#endif
#ifndef ECN_K_BYTES
#error "build with -DECN_K_BYTES=<the marking threshold>"
#endif

struct ecn_queue {
	struct bpf_spin_lock lock;
	__u64 last_ns;
	__u64 backlog;      /* the virtual queue, in bytes */
	__u64 packets;      /* offered to the link (a GSO packet counts once) */
	__u64 marked;       /* marked CE here */
	__u64 over_k;       /* found the queue above K, ECN-capable or not */
	__u64 peak_backlog; /* the longest the virtual queue has been */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ecn_queue);
} ecn_queue SEC(".maps");

/* The bytes a packet puts on the link, as htb counts them: a TCP stack may hand the link GSO
 * packets of several segments even with offloads off (segmented after the qdisc), each segment
 * with its own headers, so (segments - 1) more copies of them. */
static __always_inline __u64 wire_bytes(struct __sk_buff *skb)
{
	__u8 ihl, doff;

	if (skb->gso_segs <= 1)
		return skb->len;
	if (bpf_skb_load_bytes(skb, 14, &ihl, 1) < 0)
		return skb->len;
	ihl = (ihl & 0x0f) * 4;
	if (bpf_skb_load_bytes(skb, 14 + ihl + 12, &doff, 1) < 0)
		return skb->len;
	return skb->len + (__u64)(skb->gso_segs - 1) * (14 + ihl + (doff >> 4) * 4);
}

SEC("tc")
int ecn_mark(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct ecn_queue *q = bpf_map_lookup_elem(&ecn_queue, &zero);
	__u64 now = bpf_ktime_get_ns(), drained, backlog, bytes = wire_bytes(skb);
	int over;

	if (!q)
		return TC_ACT_OK;
	bpf_spin_lock(&q->lock);
	if (now < q->last_ns || now - q->last_ns >= NS_PER_S) { /* idle a second: empty, whatever the rate */
		backlog = 0;
	} else {
		drained = (now - q->last_ns) * LINK_BYTES_PER_S / NS_PER_S;
		backlog = drained > q->backlog ? 0 : q->backlog - drained;
	}
	q->last_ns = now;
	over = backlog > ECN_K_BYTES;
	q->backlog = backlog + bytes;
	if (q->backlog > q->peak_backlog)
		q->peak_backlog = q->backlog;
	q->packets++;
	if (over)
		q->over_k++;
	bpf_spin_unlock(&q->lock);
	if (over && bpf_skb_ecn_set_ce(skb))
		__sync_fetch_and_add(&q->marked, 1);
	return TC_ACT_OK;
}
