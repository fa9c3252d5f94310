package client

import (
	"context"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/delivery"
)

// TestOutQueueBound: data accepted to send but not yet let out by the
// window is bounded by maxOutQueueBytes; a push beyond it blocks until the
// engine takes a message (that is the backpressure on local input).
func TestOutQueueBound(t *testing.T) {
	q := newOutQueue()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg := make([]byte, 16<<10)
	for range maxOutQueueBytes / len(msg) {
		if err := q.push(ctx, msg, delivery.Measure(msg), false, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	if q.bytes != maxOutQueueBytes {
		t.Fatalf("queued %d bytes, want exactly %d", q.bytes, maxOutQueueBytes)
	}
	pushed := make(chan error, 1)
	go func() { pushed <- q.push(ctx, msg, delivery.Measure(msg), false, nil, 0) }()
	// The push cannot complete while the queue is full: it is still
	// pending after the queue reports full, and completes after one Next.
	select {
	case err := <-pushed:
		t.Fatalf("push beyond the bound returned %v without waiting", err)
	default:
	}
	if q.Next().IsZero() {
		t.Fatal("Next returned nothing from a full queue")
	}
	if err := <-pushed; err != nil {
		t.Fatal(err)
	}
	if q.bytes != maxOutQueueBytes {
		t.Fatalf("after one Next and one push: %d bytes, want %d", q.bytes, maxOutQueueBytes)
	}
	// A push that cannot get room ends with its context.
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if err := q.push(short, msg, delivery.Measure(msg), false, nil, 0); err != context.DeadlineExceeded {
		t.Fatalf("push on a full queue with an expiring context: %v", err)
	}
}
