package redis

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/backend"
	"github.com/fencelock/fencelock/internal/urlkit"
)

// topology is the kind of deployment a URL's scheme names.
type topology int

const (
	standalone topology = iota // redis, rediss: one server
	sentinel                   // redis+sentinel, rediss+sentinel: a primary found through Sentinels
	cluster                    // redis+cluster, rediss+cluster: a Redis Cluster
)

// schemes are the adapter's URL schemes: the topology each names, and
// whether it is TLS.
var schemes = map[string]struct {
	topo topology
	tls  bool
}{
	"redis": {standalone, false}, "rediss": {standalone, true},
	"redis+sentinel": {sentinel, false}, "rediss+sentinel": {sentinel, true},
	"redis+cluster": {cluster, false}, "rediss+cluster": {cluster, true},
}

// sentinelParams and clusterParams are the query parameters of the
// Sentinel and Cluster schemes besides urlParams.
var (
	sentinelParams = []string{"master_name", "sentinel_username", "sentinel_password", "addr"}
	clusterParams  = []string{"addr"}
)

// endpoint is what a URL of the adapter's stands for: the data nodes'
// client settings (opt; its Addr is the URL's first host) and, for
// Sentinel and Cluster, the addresses and settings of their own.
type endpoint struct {
	opt  *goredis.Options
	topo topology
	// addrs are the Sentinels' addresses, or a cluster's seed nodes.
	addrs                          []string
	masterName                     string
	sentinelUser, sentinelPassword string
}

// where names the endpoint in errors: its address, or its Sentinels (and
// master name), or its seed nodes.
func (e endpoint) where() string {
	switch e.topo {
	case sentinel:
		return fmt.Sprintf("master %q through the Sentinels at %s", e.masterName, strings.Join(e.addrs, ","))
	case cluster:
		return "the Redis Cluster at " + strings.Join(e.addrs, ",")
	}
	return e.opt.Addr
}

// parseEndpoint parses a URL of any of the adapter's schemes, without
// dialling. Every error matches backend.ErrInvalidURL and none holds a
// password.
func parseEndpoint(u *url.URL) (endpoint, Config, error) {
	s, ok := schemes[u.Scheme]
	if !ok {
		return endpoint{}, Config{}, fmt.Errorf("%w: %s: scheme must be redis, rediss, redis+sentinel, rediss+sentinel, redis+cluster or rediss+cluster", backend.ErrInvalidURL, urlkit.Redact(u))
	}
	if s.topo == standalone {
		opt, cfg, err := parseURL(u)
		if err != nil {
			return endpoint{}, Config{}, err
		}
		return endpoint{opt: opt, addrs: []string{opt.Addr}}, cfg, nil
	}
	all, q, err := topologyQuery(u)
	if err != nil {
		return endpoint{}, Config{}, err
	}
	addrs, err := topologyAddrs(u, s.topo, all["addr"])
	if err != nil {
		return endpoint{}, Config{}, err
	}
	e := endpoint{topo: s.topo, addrs: addrs}
	if err := e.readTopologyParams(u, q); err != nil {
		return endpoint{}, Config{}, err
	}
	opt, cfg, err := dataNodeOptions(u, q, s.topo, addrs[0])
	if err != nil {
		return endpoint{}, Config{}, err
	}
	e.opt = opt
	return e, cfg, nil
}

// topologyQuery reads the query of a Sentinel or cluster URL u: all of it,
// where addr may be given more than once (go-redis's form), and the rest,
// read strictly (urlkit.Query).
func topologyQuery(u *url.URL) (all, rest url.Values, err error) {
	all, err = url.ParseQuery(u.RawQuery)
	if err != nil {
		_, err = urlkit.Query(u)
		return nil, nil, err
	}
	others := url.Values{}
	for k, v := range all {
		if k != "addr" {
			others[k] = v
		}
	}
	ru := *u
	ru.RawQuery = others.Encode()
	rest, err = urlkit.Query(&ru)
	if err != nil {
		return nil, nil, err
	}
	return all, rest, nil
}

// topologyAddrs are the host:port addresses of a Sentinel or cluster URL
// u, from its host and its addr parameters, with topology t's default
// port where none is given, each once and in the order given.
func topologyAddrs(u *url.URL, t topology, addrParams []string) ([]string, error) {
	defaultPort := "6379"
	if t == sentinel {
		defaultPort = "26379"
	}
	var hosts []string
	if u.Host != "" {
		hosts = strings.Split(u.Host, ",")
	}
	for _, a := range addrParams {
		hosts = append(hosts, strings.Split(a, ",")...)
	}
	if len(hosts) == 0 {
		return nil, invalidURL(u, "no host: want %s://host:port,host:port,...", u.Scheme)
	}
	var addrs []string
	for _, h := range hosts {
		hp, err := urlkit.HostPort(h, defaultPort)
		if err != nil {
			return nil, invalidURL(u, "%v", err)
		}
		if host, port, err := net.SplitHostPort(hp); err == nil && host != "" {
			hp = net.JoinHostPort(host, port)
		} else {
			hp = net.JoinHostPort(hp, defaultPort)
		}
		if !slices.Contains(addrs, hp) {
			addrs = append(addrs, hp)
		}
	}
	return addrs, nil
}

// readTopologyParams checks what u (with query q) says that only e's
// topology takes: a Sentinel URL's master name and Sentinel credentials,
// which it sets in e, or a cluster URL's database (0 only).
func (e *endpoint) readTopologyParams(u *url.URL, q url.Values) error {
	switch e.topo {
	case sentinel:
		if e.masterName = q.Get("master_name"); e.masterName == "" {
			return invalidURL(u, "master_name is missing: the name the Sentinels monitor the primary under (sentinel monitor NAME ...)")
		}
		e.sentinelUser, e.sentinelPassword = q.Get("sentinel_username"), q.Get("sentinel_password")
		if q.Has("sentinel_password") && e.sentinelPassword == "" {
			return invalidURL(u, "sentinel_password is empty")
		}
		if e.sentinelUser != "" && !q.Has("sentinel_password") {
			return invalidURL(u, "sentinel_username without sentinel_password")
		}
	case cluster:
		if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
			return invalidURL(u, "path %q: a Redis Cluster has database 0 only (leave the path out)", u.Path)
		}
	}
	return nil
}

// dataNodeOptions are the go-redis options and the Config of the data
// nodes of a Sentinel or cluster URL u (query q, topology t): those of a
// redis:// URL of the first host, first, without the topology's own
// parameters, and with no TLS server name.
func dataNodeOptions(u *url.URL, q url.Values, t topology, first string) (*goredis.Options, Config, error) {
	base := *u
	base.Scheme = strings.TrimSuffix(strings.TrimSuffix(u.Scheme, "+sentinel"), "+cluster")
	base.Host = first
	for _, k := range sentinelParams {
		q.Del(k)
	}
	base.RawQuery = q.Encode()
	if t == cluster {
		base.Path = ""
	}
	opt, cfg, err := parseURL(&base)
	if err != nil {
		return nil, Config{}, err
	}
	if opt.TLSConfig != nil {
		// Each node is verified for its own host name (see dialTLS).
		opt.TLSConfig.ServerName = ""
	}
	return opt, cfg, nil
}

// failoverOptions are the Sentinel client's settings: opt's, for the
// Sentinels found at e.addrs.
func (e endpoint) failoverOptions() *goredis.FailoverOptions {
	o := e.opt
	return &goredis.FailoverOptions{
		MasterName: e.masterName, SentinelAddrs: e.addrs,
		SentinelUsername: e.sentinelUser, SentinelPassword: e.sentinelPassword,
		Dialer: o.Dialer, Protocol: o.Protocol, Username: o.Username, Password: o.Password, DB: o.DB,
		ClientName: o.ClientName, MaxRetries: o.MaxRetries, MinRetryBackoff: o.MinRetryBackoff,
		MaxRetryBackoff: o.MaxRetryBackoff, DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout,
		WriteTimeout: o.WriteTimeout, ContextTimeoutEnabled: o.ContextTimeoutEnabled, PoolFIFO: o.PoolFIFO,
		PoolSize: o.PoolSize, PoolTimeout: o.PoolTimeout, MinIdleConns: o.MinIdleConns,
		MaxIdleConns: o.MaxIdleConns, MaxActiveConns: o.MaxActiveConns, ConnMaxIdleTime: o.ConnMaxIdleTime,
		ConnMaxLifetime: o.ConnMaxLifetime, TLSConfig: o.TLSConfig,
	}
}

// clusterOptions are the cluster client's settings: opt's, for the seed
// nodes e.addrs.
func (e endpoint) clusterOptions() *goredis.ClusterOptions {
	o := e.opt
	return &goredis.ClusterOptions{
		Addrs: e.addrs, Dialer: o.Dialer, Protocol: o.Protocol, Username: o.Username, Password: o.Password,
		ClientName: o.ClientName, MaxRetries: o.MaxRetries, MinRetryBackoff: o.MinRetryBackoff,
		MaxRetryBackoff: o.MaxRetryBackoff, DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout,
		WriteTimeout: o.WriteTimeout, ContextTimeoutEnabled: o.ContextTimeoutEnabled, PoolFIFO: o.PoolFIFO,
		PoolSize: o.PoolSize, PoolTimeout: o.PoolTimeout, MinIdleConns: o.MinIdleConns,
		MaxIdleConns: o.MaxIdleConns, MaxActiveConns: o.MaxActiveConns, ConnMaxIdleTime: o.ConnMaxIdleTime,
		ConnMaxLifetime: o.ConnMaxLifetime, TLSConfig: o.TLSConfig,
	}
}

// ParseFailoverURL returns the go-redis Sentinel client options and the
// adapter's Config that a redis+sentinel:// or rediss+sentinel:// URL
// stands for, checked as backend.Open checks it and without dialling, for
// a client of your own: New(goredis.NewFailoverClient(opt), cfg).
// Every error matches backend.ErrInvalidURL.
func ParseFailoverURL(rawURL string) (*goredis.FailoverOptions, Config, error) {
	e, cfg, err := parseRaw(rawURL, sentinel)
	if err != nil {
		return nil, Config{}, err
	}
	return e.failoverOptions(), cfg, nil
}

// ParseClusterURL returns the go-redis cluster client options and the
// adapter's Config that a redis+cluster:// or rediss+cluster:// URL stands
// for, checked as backend.Open checks it and without dialling, for a
// client of your own: New(goredis.NewClusterClient(opt), cfg).
// Every error matches backend.ErrInvalidURL.
func ParseClusterURL(rawURL string) (*goredis.ClusterOptions, Config, error) {
	e, cfg, err := parseRaw(rawURL, cluster)
	if err != nil {
		return nil, Config{}, err
	}
	return e.clusterOptions(), cfg, nil
}

// checkedURL checks rawURL as backend.Open does, without dialling, and
// parses it, for the package's exported parsers.
func checkedURL(rawURL string) (*url.URL, error) {
	if err := backend.CheckURL(rawURL); err != nil {
		return nil, err
	}
	return urlkit.Parse(rawURL)
}

// parseRaw checks rawURL as backend.Open does and parses it, wanting a
// scheme of topology t.
func parseRaw(rawURL string, t topology) (endpoint, Config, error) {
	u, err := checkedURL(rawURL)
	if err != nil {
		return endpoint{}, Config{}, err
	}
	if schemes[u.Scheme].topo != t {
		want := map[topology]string{standalone: "redis or rediss (ParseURL)", sentinel: "redis+sentinel or rediss+sentinel (ParseFailoverURL)", cluster: "redis+cluster or rediss+cluster (ParseClusterURL)"}
		return endpoint{}, Config{}, fmt.Errorf("%w: %s: scheme must be %s", backend.ErrInvalidURL, urlkit.Redact(u), want[t])
	}
	return parseEndpoint(u)
}
