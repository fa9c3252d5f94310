package host

import (
	"bytes"
	"encoding/json"
	"slices"
	"sort"
	"sync"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"
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
	// views caches the catalogue actions as non-owners see them (View).
	views viewCache
}

func newRoot(s *Server) *root { return &root{s: s, terminals: map[string]rpc.TerminalInfo{}} }

// URI implements adapters.Channel.
func (r *root) URI() string { return rpc.RootChannel }

// Traits implements adapters.Channel: journaled.
func (r *root) Traits() adapters.Traits {
	return adapters.Traits{Delivery: adapters.Journaled, Label: "root"}
}

// Source implements adapters.Channel: the journal, read by cursor.
func (r *root) Source(sub adapters.Subscriber) delivery.Source {
	return adapters.NewLogSource(r, r.s.journal).Viewed(r.View(sub.Identity())).For(sub.ClientID())
}

// Subscribe implements adapters.Channel: nothing to start.
func (r *root) Subscribe(adapters.Subscriber) {}

// Unsubscribe implements adapters.Channel.
func (r *root) Unsubscribe(adapters.Subscriber) {}

// Resume implements adapters.Channel: by the journal, as a terminal.
func (r *root) Resume(sub adapters.Subscriber, lastSeq uint64) delivery.Source {
	return adapters.ResumeLog(r, r.s.journal, lastSeq).Viewed(r.View(sub.Identity())).For(sub.ClientID())
}

// Recover implements adapters.Channel.
func (r *root) Recover(lastSeq uint64) adapters.Recovery {
	return adapters.RecoverLog(r, r.s.journal, lastSeq)
}

// Receive implements adapters.Channel: root actions are not
// client-dispatchable here; each is echoed rejected (ahp.md §3), to its
// sender only.
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
	_, _ = r.s.journal.AppendTo(rpc.RootChannel, m.ClientID, func(seq uint64) ([]byte, error) { // its sender only
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

// View implements adapters.Viewed: an owner sees the whole catalogue;
// anyone else sees the terminals they may attach to, the ones they hold
// and the ones shared with them or their role (docs/protocol.md "Roles
// and sharing"): another's terminal's title, clients and shares are not
// theirs to read. The ports are the same for everyone.
func (r *root) View(id auth.Identity) adapters.View {
	if id.Role == auth.Owner {
		return nil
	}
	return catalogueView{id: id, cache: &r.views}
}

// catalogueView is the root as a non-owner sees it (root.View).
type catalogueView struct {
	id    auth.Identity
	cache *viewCache
}

// viewCache keeps the last root/terminalsChanged decoded and its text as
// each identity sees it, so that a change of the catalogue is decoded
// once and encoded once per identity, not once per subscriber: the
// ordinary subscriptions' views run under the journal's lock.
type viewCache struct {
	mu   sync.Mutex
	text []byte // the action decoded (held: its address is not reused while cached)
	env  rpc.ActionEnvelope
	list []rpc.TerminalInfo
	// seen is text as each identity ("name\x00role") sees it, at most
	// maxCachedViews of them (past it the map starts again).
	seen map[string][]byte
}

// maxCachedViews bounds viewCache.seen.
const maxCachedViews = 256

// sees reports whether the catalogue entry t is one v.id may attach to,
// as the entry itself says (holder and shares): the same rule as the
// terminal's own (pty.Terminal.Access), so a replayed action shows what
// it showed when it was appended.
func (v catalogueView) sees(t rpc.TerminalInfo) bool {
	if v.id.Name != "" && t.Holder == v.id.Name {
		return true
	}
	for _, s := range t.Shares {
		if (s.With.Principal != "" && s.With.Principal == v.id.Name) || (s.With.Role != "" && s.With.Role == string(v.id.Role)) {
			return true
		}
	}
	return false
}

func (v catalogueView) filter(list []rpc.TerminalInfo) []rpc.TerminalInfo {
	seen := make([]rpc.TerminalInfo, 0, len(list))
	for _, t := range list {
		if v.sees(t) {
			seen = append(seen, t)
		}
	}
	return seen
}

// State implements adapters.View: RootState with v's terminals.
func (v catalogueView) State(state json.RawMessage) json.RawMessage {
	var st rpc.RootState
	if json.Unmarshal(state, &st) != nil {
		return state // the root's own encoding: never
	}
	st.Terminals = v.filter(st.Terminals)
	out, err := rpc.Marshal(st)
	if err != nil {
		return state
	}
	return out
}

// terminalsAction marks the actions State's terminals change by.
var terminalsAction = []byte(`"` + rpc.ActionRootTerminals + `"`)

// Action implements adapters.View: root/terminalsChanged, appended by
// the host (SetTerminal), with v's terminals; any other action as it is.
func (v catalogueView) Action(text []byte) []byte {
	if !bytes.Contains(text, terminalsAction) {
		return text
	}
	c := v.cache
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.text) != len(text) || len(text) == 0 || &c.text[0] != &text[0] {
		var n struct {
			Params rpc.ActionEnvelope `json:"params"`
		}
		var a rpc.RootTerminalsAction
		if json.Unmarshal(text, &n) != nil || n.Params.Origin != nil || json.Unmarshal(n.Params.Action, &a) != nil || a.Type != rpc.ActionRootTerminals {
			return text // not the host's: a client's rejected action, which only its sender gets
		}
		c.text, c.env, c.list, c.seen = text, n.Params, a.Terminals, nil
	}
	key := v.id.Name + "\x00" + string(v.id.Role)
	if out, ok := c.seen[key]; ok {
		return out
	}
	enc, err := rpc.Marshal(rpc.RootTerminalsAction{Type: rpc.ActionRootTerminals, Terminals: v.filter(c.list)})
	if err != nil {
		return text
	}
	out := rpc.AppendActionEnvelope(nil, c.env.Channel, enc, c.env.ServerSeq)
	if c.seen == nil || len(c.seen) >= maxCachedViews {
		c.seen = map[string][]byte{}
	}
	c.seen[key] = out
	return out
}

var (
	_ adapters.Channel = (*root)(nil)
	_ adapters.Root    = (*root)(nil)
	_ adapters.Viewed  = (*root)(nil)
)
