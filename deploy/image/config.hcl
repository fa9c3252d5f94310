# The configuration of the sidecar image (deploy/image): every interface, state in the
# /var/lib/sidecar volume, the token from $SIDECAR_TOKEN (or mount a file and set
# auth.token_file), probes and metrics on 9464. Every other setting is the default of
# the repository's config.hcl; mount your own file over /etc/sidecar/config.hcl to change it.
state_dir = "/var/lib/sidecar"

listener {
  # TCP (WebSocket) and UDP (WebTransport) on the same port.
  address = "0.0.0.0:4433"
  # transport-io host ordinal: distinct for every sidecar behind one proxy (mount a
  # config with its own), or -1 for the number ending the host name (a StatefulSet's
  # pod demo-3: 3; deploy/kubernetes/configmap.yaml).
  host_ordinal = 0
  # Kubernetes: the endpoints controller needs a few seconds to take a terminating pod
  # out of its Service; /readyz answers 503 meanwhile.
  drain_delay = "5s"
}

terminal {
  shell = "/bin/sh"
}

metrics {
  # /metrics, /healthz and /readyz (plain HTTP). Keep 9464 off the Service's public ports
  # (deploy/kubernetes: the NetworkPolicy lets only the kubelet and the monitoring
  # namespace in).
  listen = "0.0.0.0:9464"
}
