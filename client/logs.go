package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	logspb "go.opentelemetry.io/proto/otlp/logs/v1"

	"github.com/sidecar-dev/sidecar/rpc"
)

// ErrBadLogs is returned by Logs.Next for a message that does not decode
// (the host broke the OTLP/JSON encoding).
var ErrBadLogs = errors.New("client: bad logs batch")

// Logs is a subscription to one of the host's OTLP logs channels: the
// machine's logs (rpc.LogFilesChannel, rpc.JournalChannel: our
// extension, docs/protocol.md "The machine's logs") or the sidecar's own
// (rpc.LogsChannel). Live: records the subscription cannot take are
// skipped, never queued without bound, and the next batch says how many
// were (LogsBatch.Skipped).
type Logs struct {
	sub *Subscription
}

// LogsBatch is one message of a logs channel.
type LogsBatch struct {
	// Snapshot is true for the windowed subscription's channel/snapshot
	// (no records): Backlog is then how many records the host held for
	// the channel when it was taken, which come first (a machine log
	// channel's ring; 0 for the sidecar's own logs).
	Snapshot bool
	Backlog  uint64
	// Payload is the OTLP/JSON ExportLogsServiceRequest exactly as the
	// host sent it; Data is Payload decoded.
	Payload json.RawMessage
	Data    *logspb.LogsData
	// Skipped is how many records of the channel this subscription did
	// not get before these (our extension "skipped").
	Skipped uint64
}

// Records returns how many records b holds.
func (b LogsBatch) Records() int {
	n := 0
	if b.Data != nil {
		for _, rl := range b.Data.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				n += len(sl.LogRecords)
			}
		}
	}
	return n
}

// SubscribeLogs subscribes to the logs channel uri (as the initialize
// result advertises it, its template expanded). The errors are
// Subscribe's: a refused channel (a file outside the host's
// telemetry.log_files) is an *rpc.Error naming the rule.
func (c *Conn) SubscribeLogs(ctx context.Context, uri string) (*Logs, error) {
	sub, err := c.Subscribe(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", uri, err)
	}
	return &Logs{sub: sub}, nil
}

// Channel returns the channel subscribed to.
func (l *Logs) Channel() string { return l.sub.Channel }

// Next returns the next message, blocking until one arrives or ctx ends.
// It returns the subscription's error once it ended (the connection
// closed, Close), and ErrBadLogs for one that does not decode.
func (l *Logs) Next(ctx context.Context) (LogsBatch, error) {
	for {
		msg, err := l.sub.Next(ctx)
		if err != nil {
			return LogsBatch{}, err
		}
		switch msg.Method {
		case rpc.MethodChannelSnapshot:
			var p struct {
				Snapshot struct {
					State struct {
						Backlog uint64 `json:"backlog"`
					} `json:"state"`
				} `json:"snapshot"`
			}
			err := json.Unmarshal(msg.Params, &p)
			msg.Release()
			if err != nil {
				return LogsBatch{}, fmt.Errorf("%w: %s params: %v", ErrBadLogs, msg.Method, err)
			}
			return LogsBatch{Snapshot: true, Backlog: p.Snapshot.State.Backlog}, nil
		case rpc.MethodOTLPExportLogs:
		default:
			msg.Release()
			continue
		}
		b := LogsBatch{Data: &logspb.LogsData{}}
		b.Payload, b.Skipped, err = decodeExport(msg, b.Data, ErrBadLogs)
		if err != nil {
			return LogsBatch{}, err
		}
		return b, nil
	}
}

// Close ends the subscription (unsubscribe).
func (l *Logs) Close() error { return l.sub.Unsubscribe() }
