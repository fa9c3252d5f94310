package transport

import (
	"context"
	"sync"
)

// Pipe returns two connected in-memory MessageConns, for tests and for
// running a client and host in one process. Each direction holds at most
// capacity messages; a writer blocks beyond that (like a full socket).
// Closing either end ends both with a *PipeCloseError carrying the code.
func Pipe(capacity int) (MessageConn, MessageConn) {
	if capacity <= 0 {
		capacity = 1
	}
	st := &pipeState{done: make(chan struct{})}
	ab := make(chan []byte, capacity)
	ba := make(chan []byte, capacity)
	return &pipeEnd{st: st, in: ba, out: ab, name: "pipe-a"}, &pipeEnd{st: st, in: ab, out: ba, name: "pipe-b"}
}

// PipeCloseError is what a Pipe end returns once closed.
type PipeCloseError struct {
	Code   CloseCode
	Reason string
}

func (e *PipeCloseError) Error() string { return "pipe closed: " + e.Reason }

type pipeState struct {
	once sync.Once
	done chan struct{}
	err  *PipeCloseError
}

type pipeEnd struct {
	st      *pipeState
	in, out chan []byte
	name    string
}

func (p *pipeEnd) ReadMessage(ctx context.Context) ([]byte, error) {
	select {
	case m := <-p.in:
		return m, nil
	default:
	}
	select {
	case m := <-p.in:
		return m, nil
	case <-p.st.done:
		return nil, p.st.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *pipeEnd) WriteMessage(ctx context.Context, text []byte) error {
	select {
	case <-p.st.done:
		return p.st.err
	default:
	}
	select {
	case p.out <- append([]byte(nil), text...):
		return nil
	case <-p.st.done:
		return p.st.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pipeEnd) Close(code CloseCode, reason string) error {
	p.st.once.Do(func() {
		p.st.err = &PipeCloseError{Code: code, Reason: reason}
		close(p.st.done)
	})
	return nil
}

func (p *pipeEnd) Peer() string { return p.name }
