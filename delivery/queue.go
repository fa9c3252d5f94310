package delivery

import "fmt"

// fifo is a slice queue that releases references as it pops.
type fifo struct {
	items [][]byte
	head  int
}

func (q *fifo) len() int { return len(q.items) - q.head }

func (q *fifo) push(t []byte) { q.items = append(q.items, t) }

func (q *fifo) pop() ([]byte, bool) {
	if q.head == len(q.items) {
		return nil, false
	}
	t := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return t, true
}

type ordinaryItem struct {
	channel string
	seq     uint64
	text    []byte
	sz      UTF16Bytes
}

// size is the item's UTF-16 size, measured when it was queued (the writer
// reads it after releasing the lock, so it must never be written later).
func (it *ordinaryItem) size() UTF16Bytes { return it.sz }

// ordinaryQueue is the one FIFO of ordinary-subscription actions, kept in
// serverSeq order (DESIGN.md §4).
type ordinaryQueue struct {
	items []ordinaryItem
	head  int
	// lastSeq is the serverSeq of the last action of each channel handed to
	// the writer: the gap after a collapse starts there.
	lastSeq map[string]uint64
}

func (q *ordinaryQueue) len() int { return len(q.items) - q.head }

func (q *ordinaryQueue) push(it ordinaryItem) { q.items = append(q.items, it) }

func (q *ordinaryQueue) peek() (*ordinaryItem, bool) {
	if q.head == len(q.items) {
		return nil, false
	}
	return &q.items[q.head], true
}

func (q *ordinaryQueue) pop() (ordinaryItem, bool) {
	if q.head == len(q.items) {
		return ordinaryItem{}, false
	}
	it := q.items[q.head]
	q.items[q.head] = ordinaryItem{}
	q.head++
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	if it.seq > q.lastSeq[it.channel] {
		q.lastSeq[it.channel] = it.seq
	}
	return it, true
}

// collapse empties the queue and returns the channels it held, in order
// of first appearance: each needs a channel/gap.
func (q *ordinaryQueue) collapse() []string {
	var order []string
	seen := map[string]bool{}
	for _, it := range q.items[q.head:] {
		if !seen[it.channel] {
			seen[it.channel] = true
			order = append(order, it.channel)
		}
	}
	clear(q.items)
	q.items, q.head = q.items[:0], 0
	return order
}

func (q *ordinaryQueue) drop(channel string) {
	kept := q.items[:q.head]
	for _, it := range q.items[q.head:] {
		if it.channel != channel {
			kept = append(kept, it)
		}
	}
	clear(q.items[len(kept):])
	q.items = kept
	delete(q.lastSeq, channel)
}

// appendGap appends {"jsonrpc":"2.0","method":"channel/gap","params":{"channel":C,"afterSeq":N}}.
func appendGap(dst []byte, channel string, afterSeq uint64) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","method":"channel/gap","params":{"channel":`...)
	dst = AppendJSONString(dst, channel)
	dst = fmt.Appendf(dst, `,"afterSeq":%d}}`, afterSeq)
	return dst
}
