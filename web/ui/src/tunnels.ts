// Every client's port forwards, as the tunnels channel has them
// (ahp-tunnels://, docs/protocol.md "Tunnels channel"): its snapshot,
// then its actions applied in order.

export interface Address {
  host: string;
  port: number;
}

export interface ClientState {
  status: string; // pending, accepted, ready, failed, declined, unavailable
  localAddress?: Address;
  remoteAddress?: Address;
  error?: { errorType?: string; message?: string };
  reason?: string;
}

export interface Participant {
  clientId: string;
  state: ClientState;
}

export interface Tunnel {
  resource: string;
  direction: "hostToClient" | "clientToHost";
  requestedLocalAddress?: Address;
  requestedRemoteAddress?: Address;
  requestedBy?: { kind: string; clientId?: string };
  title?: string;
  client?: Participant; // the snapshot and a client's portSet name one
  clients?: Participant[]; // or several
}

/** participants are an entry's clients, however it names them. */
export function participants(t: Tunnel): Participant[] {
  return t.clients ?? (t.client ? [t.client] : []);
}

/** The channel's actions (tunnel/*). */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function applyTunnel(list: Tunnel[], a: any): Tunnel[] {
  const find = (r: string) => list.findIndex((t) => t.resource === r);
  const withClients = (t: Tunnel, f: (ps: Participant[]) => Participant[]): Tunnel => {
    const { client: _c, ...rest } = t;
    return { ...rest, clients: f(participants(t)) };
  };
  switch (a?.type) {
    case "tunnel/portSet": {
      if (!a.port?.resource) return list;
      const i = find(a.port.resource);
      return i < 0 ? [...list, a.port] : list.map((t, j) => (j === i ? a.port : t));
    }
    case "tunnel/portRemoved":
      return list.filter((t) => t.resource !== a.resource);
    case "tunnel/portClientSet":
      return list.map((t) => (t.resource === a.resource && a.client ? withClients(t, (ps) => [...ps.filter((p) => p.clientId !== a.client.clientId), a.client]) : t));
    case "tunnel/portClientUpdated":
      return list.map((t) => (t.resource === a.resource ? withClients(t, (ps) => ps.map((p) => (p.clientId === a.clientId ? { ...p, state: a.state } : p))) : t));
    case "tunnel/portClientRemoved":
      return list.map((t) => (t.resource === a.resource ? withClients(t, (ps) => ps.filter((p) => p.clientId !== a.clientId)) : t));
  }
  return list;
}

const addr = (a: Address | undefined) => (a ? `${a.host.includes(":") ? `[${a.host}]` : a.host}:${a.port}` : "?");

/**
 * describe says what an entry forwards, as sidecar forward is written:
 * "-L 8080 → 127.0.0.1:5432" (the client listens on its machine, the
 * workload dials), "-R 127.0.0.1:41234 → 127.0.0.1:3000" (the workload
 * listens, the client dials), with the addresses in use once ready.
 */
export function describe(t: Tunnel): { flag: string; text: string; who: string; state: string; detail: string } {
  const p = participants(t)[0];
  const ready = p?.state.status === "ready" ? p.state : undefined;
  const local = ready?.localAddress ?? t.requestedLocalAddress;
  const remote = ready?.remoteAddress ?? t.requestedRemoteAddress;
  const flag = t.direction === "clientToHost" ? "-R" : "-L";
  const text =
    t.direction === "clientToHost"
      ? `workload ${addr(local)} → client ${addr(remote)}`
      : `client ${addr(local)} → workload ${addr(remote)}`;
  const who = t.requestedBy?.clientId ?? t.requestedBy?.kind ?? "";
  const state = p?.state.status ?? "no client";
  const detail = p?.state.error?.message ?? p?.state.reason ?? "";
  return { flag, text, who, state, detail };
}
