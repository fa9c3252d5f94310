package rpc

import "testing"

func testReversePort(res, client string) TunnelPort {
	return TunnelPort{Resource: res, Direction: TunnelClientToHost,
		RequestedLocalAddress: TunnelAddress{Host: "127.0.0.1", Port: 0}, RequestedRemoteAddress: TunnelAddress{Host: "localhost", Port: 3000},
		RequestedBy: TunnelRequester{Kind: "client", ClientID: client}, CreatedAt: "2025-01-01T00:00:00Z",
		Client: &TunnelClient{ClientID: client, State: TunnelClientState{Status: TunnelAccepted}}}
}

// TestReduce follows the upstream reducer: set appends then replaces in
// place, client updates touch the named participant only, clientRemoved
// is a no-op on clientToHost, removed drops the entry, unknown ones are
// no-ops.
func TestReduce(t *testing.T) {
	var ports []TunnelPort
	a := testReversePort("ahp-tunnel:/a", "c1")
	ports = ReduceTunnels(ports, &TunnelAction{Type: ActionTunnelPortSet, Port: &a})
	local := TunnelPort{Resource: "ahp-tunnel:/b", Direction: TunnelHostToClient,
		Clients: []TunnelClient{{ClientID: "c1", State: TunnelClientState{Status: TunnelPending}}}}
	ports = ReduceTunnels(ports, &TunnelAction{Type: ActionTunnelPortSet, Port: &local})
	ready := TunnelClientState{Status: TunnelReady}
	ports = ReduceTunnels(ports, &TunnelAction{Type: ActionTunnelPortClientUpdated, Resource: "ahp-tunnel:/a", ClientID: "c1", State: &ready})
	ports = ReduceTunnels(ports, &TunnelAction{Type: ActionTunnelPortClientUpdated, Resource: "ahp-tunnel:/a", ClientID: "other", State: &TunnelClientState{Status: TunnelFailed}})
	ports = ReduceTunnels(ports, &TunnelAction{Type: ActionTunnelPortClientSet, Resource: "ahp-tunnel:/b", Client: &TunnelClient{ClientID: "c2"}})
	ports = ReduceTunnels(ports, &TunnelAction{Type: ActionTunnelPortClientRemoved, Resource: "ahp-tunnel:/a", ClientID: "c1"})
	ports = ReduceTunnels(ports, &TunnelAction{Type: ActionTunnelPortClientRemoved, Resource: "ahp-tunnel:/b", ClientID: "c1"})
	if len(ports) != 2 || ports[0].Client == nil || ports[0].Client.State.Status != TunnelReady {
		t.Fatalf("after updates: %+v", ports)
	}
	if a.Client.State.Status != TunnelAccepted {
		t.Errorf("the action's own participant changed: %+v", a.Client)
	}
	if len(ports[1].Clients) != 1 || ports[1].Clients[0].ClientID != "c2" {
		t.Errorf("hostToClient participants: %+v", ports[1].Clients)
	}
	ports = ReduceTunnels(ports, &TunnelAction{Type: ActionTunnelPortRemoved, Resource: "ahp-tunnel:/a"})
	ports = ReduceTunnels(ports, &TunnelAction{Type: ActionTunnelPortRemoved, Resource: "ahp-tunnel:/none"})
	if len(ports) != 1 || ports[0].Resource != "ahp-tunnel:/b" {
		t.Errorf("after removal: %+v", ports)
	}
}
