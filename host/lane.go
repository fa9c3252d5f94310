package host

import (
	"context"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/sidecar-dev/sidecar/rpc"
)

// laneNotifications bounds the notifications queued in a connection's
// lane behind its requests (beside the at most
// delivery.max_concurrent_requests requests): data a client sends while
// its requests run. Past it the reader waits (the transport then stops
// the client's writes): a client that keeps sending while a request is
// slow is paced, and its credit waits only then.
const laneNotifications = 256

// laneItem is a request (req set) or a notification (h set) for the lane.
type laneItem struct {
	req *jsonrpc2.Request
	rc  *jsonrpc2.Conn
	ctx context.Context

	h   *rpc.Header
	raw []byte
}

// enqueue sends it to the lane. A notification first waits for one of
// the laneNotifications places (laneNotes); a request has its place
// already (maxInProgress), so the send itself never waits.
func (c *conn) enqueue(it laneItem) {
	if it.req == nil {
		select {
		case c.laneNotes <- struct{}{}:
		case <-c.ctx.Done():
			return
		}
	}
	c.laneLen.Add(1)
	select {
	case c.lane <- it:
	case <-c.ctx.Done():
		c.laneLen.Add(-1)
		if it.req != nil {
			c.inProgress.Add(-1)
			c.owed.Add(-1)
		}
	}
}

// runLane runs the lane's items in order until the connection ends.
func (c *conn) runLane() {
	defer close(c.laneDone)
	for {
		select {
		case it := <-c.lane:
			if c.ctx.Err() == nil {
				if it.req != nil {
					c.handleRequest(it.ctx, it.rc, it.req)
				} else {
					_ = c.handleNotification(it.h, it.raw) // an error has closed the connection
				}
			}
			if it.req == nil {
				<-c.laneNotes
			}
			c.laneLen.Add(-1)
		case <-c.ctx.Done():
			return
		}
	}
}
