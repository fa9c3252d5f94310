package host

import (
	"encoding/json"
	"slices"
	"sort"
	"sync"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

// root is the ahp-root:// channel: the terminal catalogue and the
// listening ports (our extension). Its actions are journaled.
type root struct {
	adapters.Base
	s  *Server
	mu sync.Mutex
	// terminals is the catalogue, kept here so that the root never takes a
	// terminal lock (terminals call update while holding theirs).
	terminals map[string]rpc.TerminalInfo
	// ports is RootState.ports.
	ports []rpc.ListeningPort
}

func newRoot(s *Server) *root { return &root{s: s, terminals: map[string]rpc.TerminalInfo{}} }

// URI implements adapters.Channel.
func (r *root) URI() string { return rpc.RootChannel }

// Traits implements adapters.Channel: journaled.
func (r *root) Traits() adapters.Traits {
	return adapters.Traits{Delivery: adapters.Journaled, Label: "root"}
}

// Source implements adapters.Channel: the journal, read by cursor.
func (r *root) Source(adapters.Subscriber) delivery.Source {
	return adapters.NewLogSource(r, r.s.journal)
}

// Subscribe implements adapters.Channel: nothing to start.
func (r *root) Subscribe(adapters.Subscriber) {}

// Unsubscribe implements adapters.Channel.
func (r *root) Unsubscribe(adapters.Subscriber) {}

// Resume implements adapters.Channel: by the journal, as a terminal.
func (r *root) Resume(_ adapters.Subscriber, lastSeq uint64) delivery.Source {
	return adapters.ResumeLog(r, r.s.journal, lastSeq)
}

// Recover implements adapters.Channel.
func (r *root) Recover(lastSeq uint64) adapters.Recovery {
	return adapters.RecoverLog(r, r.s.journal, lastSeq)
}

// Receive implements adapters.Channel: root actions are not
// client-dispatchable here; each is echoed rejected (ahp.md §3).
func (r *root) Receive(m adapters.Message) {
	defer m.Release()
	if m.Header.Method != rpc.MethodDispatchAction {
		return
	}
	var p rpc.DispatchActionParams
	var a rpc.Action
	if e := rpc.DecodeParams(m.Header.Params, &p); e != nil || json.Unmarshal(p.Action, &a) != nil || a.Type == "" {
		r.s.log.Warn("bad dispatchAction", "client", m.ClientID, "channel", rpc.RootChannel)
		return
	}
	origin := &rpc.Origin{ClientID: m.ClientID, ClientSeq: p.ClientSeq}
	_, _ = r.s.journal.Append(rpc.RootChannel, func(seq uint64) ([]byte, error) {
		return rpc.Notification(rpc.MethodAction, rpc.ActionEnvelope{Channel: rpc.RootChannel, Action: p.Action, ServerSeq: seq, Origin: origin,
			RejectionReason: "root actions are not client-dispatchable on this host"})
	})
}

func (r *root) listLocked() []rpc.TerminalInfo {
	list := make([]rpc.TerminalInfo, 0, len(r.terminals))
	for _, t := range r.terminals {
		list = append(list, t)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Resource < list[j].Resource })
	return list
}

// Snapshot implements adapters.Channel.
func (r *root) Snapshot(fn func(rpc.Snapshot)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	state, _ := rpc.Marshal(rpc.RootState{Agents: []json.RawMessage{}, Terminals: r.listLocked(), Ports: r.ports})
	fn(rpc.Snapshot{Resource: rpc.RootChannel, State: state, FromSeq: r.s.journal.Seq()})
}

// SetTerminal implements adapters.Root: it sets (or with remove, deletes)
// a terminal's catalogue entry and dispatches root/terminalsChanged with
// the full list (ahp.md §4).
func (r *root) SetTerminal(info rpc.TerminalInfo, remove bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if remove {
		delete(r.terminals, info.Resource)
	} else {
		r.terminals[info.Resource] = info
	}
	action := rpc.RootTerminalsAction{Type: rpc.ActionRootTerminals, Terminals: r.listLocked()}
	_, _ = r.s.journal.Append(rpc.RootChannel, adapters.HostAction(rpc.RootChannel, action))
}

// SetPorts implements adapters.Root: it replaces RootState.ports and,
// when it changed, dispatches root/portsChanged with the full list.
func (r *root) SetPorts(ports []rpc.ListeningPort) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ports != nil && slices.Equal(r.ports, ports) {
		return
	}
	r.ports = ports
	action := rpc.RootPortsAction{Type: rpc.ActionRootPorts, Ports: ports}
	_, _ = r.s.journal.Append(rpc.RootChannel, adapters.HostAction(rpc.RootChannel, action))
}

var (
	_ adapters.Channel = (*root)(nil)
	_ adapters.Root    = (*root)(nil)
)
