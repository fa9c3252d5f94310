package rpc

import (
	"encoding/json"
	"testing"

	"github.com/sidecar-dev/sidecar/delivery"
)

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The host builds these with empty, non-nil slices (host/conn.go initialize,
// host/channel.go root.lockedSnapshot, host/terminal.go stateLocked); every
// declared array must then be [] on the wire, never null (ahp.md §8).
func TestArraysMarshalAsEmptyNotNull(t *testing.T) {
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"initialize result", InitializeResult{ProtocolVersion: "0.5.0", ServerSeq: 0, ServerInfo: &ServerInfo{Name: "sidecar", Version: "dev"}, Snapshots: []Snapshot{}},
			`{"protocolVersion":"0.5.0","serverSeq":0,"serverInfo":{"name":"sidecar","version":"dev"},"snapshots":[]}`},
		{"root state", RootState{Agents: []json.RawMessage{}, Terminals: make([]TerminalInfo, 0)},
			`{"agents":[],"terminals":[]}`},
		{"terminal state", TerminalState{Title: "sh", Cols: 80, Rows: 24, Content: []ContentPart{}, Lifecycle: Lifecycle{Status: "running"}, Claim: Claim{Kind: "client", ClientID: "c1"}},
			`{"title":"sh","cols":80,"rows":24,"content":[],"lifecycle":{"status":"running"},"claim":{"kind":"client","clientId":"c1"}}`},
		{"root terminals action", RootTerminalsAction{Type: ActionRootTerminals, Terminals: []TerminalInfo{}},
			`{"type":"root/terminalsChanged","terminals":[]}`},
		{"unsupported version data", UnsupportedVersionData{SupportedVersions: []string{"^0.5.0"}},
			`{"supportedVersions":["^0.5.0"]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustMarshal(t, tc.v); got != tc.want {
				t.Fatalf("Marshal =\n %s\nwant\n %s", got, tc.want)
			}
		})
	}
}

func TestWireShapes(t *testing.T) {
	exit := 7
	l := delivery.Limits{WindowBytes: 4096, MaximumFrameBytes: 1024}
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"windowed subscribe result has no snapshot", SubscribeResult{FlowControl: &NegotiatedFlowControl{ClientReceive: l, HostReceive: l}},
			`{"flowControl":{"clientReceive":{"windowBytes":4096,"maximumFrameBytes":1024},"hostReceive":{"windowBytes":4096,"maximumFrameBytes":1024}}}`},
		{"stateless subscribe result", SubscribeResult{}, `{}`},
		{"ordinary subscribe result", SubscribeResult{Snapshot: &Snapshot{Resource: "ahp-terminal:/t", State: json.RawMessage(`{}`), FromSeq: 5}},
			`{"snapshot":{"resource":"ahp-terminal:/t","state":{},"fromSeq":5}}`},
		{"exited with code", TerminalExitedAction{Type: ActionTerminalExited, ExitCode: &exit}, `{"type":"terminal/exited","exitCode":7}`},
		{"exited killed", TerminalExitedAction{Type: ActionTerminalExited}, `{"type":"terminal/exited"}`},
		{"rejected envelope", ActionEnvelope{Channel: "c", Action: json.RawMessage(`{"type":"terminal/data","data":"x"}`), ServerSeq: 3, Origin: &Origin{ClientID: "c1", ClientSeq: 1}, RejectionReason: "terminal/data is a host-only action"},
			`{"channel":"c","action":{"type":"terminal/data","data":"x"},"serverSeq":3,"origin":{"clientId":"c1","clientSeq":1},"rejectionReason":"terminal/data is a host-only action"}`},
		{"frame non-final omits final", ChannelFrameParams{Channel: "c", Data: "{"}, `{"channel":"c","data":"{"}`},
		{"frame final", ChannelFrameParams{Channel: "c", Data: "}", Final: true}, `{"channel":"c","data":"}","final":true}`},
		{"credit", ChannelCreditParams{Channel: "c", ConsumedBytes: 1254}, `{"channel":"c","consumedBytes":1254}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := mustMarshal(t, tc.v); got != tc.want {
				t.Fatalf("Marshal =\n %s\nwant\n %s", got, tc.want)
			}
		})
	}
}

// The channel/credit and channel/frame texts the delivery package builds by
// hand are the same bytes rpc.Notification produces for the same params, so
// both sides measure identical sizes.
func TestHandBuiltNotificationsMatchRPC(t *testing.T) {
	credit, err := Notification(MethodChannelCredit, ChannelCreditParams{Channel: "ahp-terminal:/t<1>", ConsumedBytes: 804})
	if err != nil {
		t.Fatal(err)
	}
	if got := delivery.AppendCredit(nil, "ahp-terminal:/t<1>", 804); string(got) != string(credit) {
		t.Fatalf("AppendCredit = %s, rpc = %s", got, credit)
	}
	frame, err := Notification(MethodChannelFrame, ChannelFrameParams{Channel: "c", Data: "{\"a\":\"<\\n>\"}", Final: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := delivery.AppendFrame(nil, "c", []byte("{\"a\":\"<\\n>\"}"), true); string(got) != string(frame) {
		t.Fatalf("AppendFrame = %s, rpc = %s", got, frame)
	}
}
