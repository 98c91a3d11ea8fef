package main

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/pgmirror/pgmirror/engine/defaults"
)

// config is the service configuration read from the environment. Every
// variable is documented in docs/configuration.md.
type config struct {
	DatabaseURL      string
	Port             int
	AdminUser        string
	AdminPassword    string
	adminPasswordSet bool
	JWTSecret        string
	// EncryptionKey, EncryptionKeyFile and EncryptionOldKeys configure the
	// catalog encryption keys (keys.go). Never log them.
	EncryptionKey     string
	EncryptionKeyFile string
	EncryptionOldKeys string
	LogLevel          slog.Level
	LogFormat         string
	CPUScheduling     string // cpuSchedulingBatch or cpuSchedulingNormal (cpusched.go)
	DataDir           string
	EmbeddedPort      int
	MirrorWorkers     int
	LogRetention      time.Duration
	// HistoryRetention is how long mirrors' lag and throughput samples are
	// kept.
	HistoryRetention time.Duration
	ShutdownTimeout  time.Duration
	// TokenTTL is the lifetime of API tokens; zero: tokens do not expire.
	TokenTTL time.Duration
	// RevokeTokensOnPasswordChange makes a password change revoke the
	// user's earlier tokens.
	RevokeTokensOnPasswordChange bool
	// MetricsToken, when set, is the bearer token GET /metrics requires.
	// Never log it.
	MetricsToken string
	// PGBin is where the embedded cluster's server binaries are (PGBIN);
	// empty: the distribution's.
	PGBin string
	// SlotMonitorInterval is how often the slot monitor reads the slots.
	SlotMonitorInterval time.Duration
	// SequenceSyncInterval is how often running mirrors sync sequences.
	SequenceSyncInterval time.Duration
	// VerifyScheduleInterval is how often due scheduled verifications start.
	VerifyScheduleInterval time.Duration
	// CutoverChecksumMaxBytes is the largest source table whose checksums
	// a cut-over compares by default (jobs.Config).
	CutoverChecksumMaxBytes int
	// Login throttling (httpapi.LoginLimits).
	LoginUserFailures    int
	LoginAddressFailures int
	LoginFailureWindow   time.Duration
	TrustedProxies       []netip.Prefix
	// AllowSocketPeers lets a peer's host be a Unix-socket directory.
	AllowSocketPeers bool
	HTTP             httpConfig
}

func loadConfig(getenv func(string) string) (config, error) {
	cfg := config{
		DatabaseURL:   getenv("SERVICE_DATABASE_URL"),
		AdminUser:     cmp.Or(getenv("SERVICE_ADMIN_USER"), "admin"),
		AdminPassword: cmp.Or(getenv("SERVICE_ADMIN_PASSWORD"), "admin"),
		JWTSecret:     getenv("SERVICE_JWT_SECRET"),

		EncryptionKey:     getenv("SERVICE_ENCRYPTION_KEY"),
		EncryptionKeyFile: getenv("SERVICE_ENCRYPTION_KEY_FILE"),
		EncryptionOldKeys: getenv("SERVICE_ENCRYPTION_OLD_KEYS"),
		LogFormat:         cmp.Or(getenv("SERVICE_LOG_FORMAT"), "text"),
		CPUScheduling:     cmp.Or(getenv("SERVICE_CPU_SCHEDULING"), cpuSchedulingBatch),
		DataDir:           cmp.Or(getenv("SERVICE_DATA_DIR"), ".pgmirror"),
		MetricsToken:      getenv("SERVICE_METRICS_TOKEN"),
		PGBin:             getenv("PGBIN"),
	}
	cfg.adminPasswordSet = getenv("SERVICE_ADMIN_PASSWORD") != ""
	if err := loadTunables(getenv, &cfg); err != nil {
		return cfg, err
	}
	var err error
	if cfg.HTTP, err = loadHTTPConfig(getenv); err != nil {
		return cfg, err
	}
	if cfg.AllowSocketPeers, err = boolVar(getenv, "SERVICE_ALLOW_SOCKET_PEERS"); err != nil {
		return cfg, err
	}
	if cfg.LogLevel, err = logLevelVar(getenv, "SERVICE_LOG_LEVEL"); err != nil {
		return cfg, err
	}
	if cfg.TrustedProxies, err = prefixesVar(getenv, "SERVICE_TRUSTED_PROXIES"); err != nil {
		return cfg, err
	}
	return cfg, cfg.check()
}

// loadTunables reads the numbers and durations: ports, workers, retention,
// intervals, timeouts and login limits.
func loadTunables(getenv func(string) string, cfg *config) error {
	var err error
	if cfg.Port, err = intVar(getenv, "SERVICE_PORT", 8112, 1, 65535); err != nil {
		return err
	}
	if cfg.EmbeddedPort, err = intVar(getenv, "SERVICE_EMBEDDED_PG_PORT", 55432, 1, 65535); err != nil {
		return err
	}
	if cfg.MirrorWorkers, err = intVar(getenv, "SERVICE_MIRROR_WORKERS", defaults.MirrorWorkers, 1, 10000); err != nil {
		return err
	}
	if cfg.LogRetention, err = durationVar(getenv, "SERVICE_LOG_RETENTION", defaults.LogRetention); err != nil {
		return err
	}
	if cfg.HistoryRetention, err = boundedDurationVar(getenv, "SERVICE_METRICS_HISTORY_RETENTION", defaults.MetricsHistoryRetention, time.Hour, 90*24*time.Hour); err != nil {
		return err
	}
	if cfg.ShutdownTimeout, err = durationVar(getenv, "SERVICE_SHUTDOWN_TIMEOUT", defaults.ShutdownTimeout); err != nil {
		return err
	}
	if cfg.SlotMonitorInterval, err = boundedDurationVar(getenv, "SERVICE_SLOT_MONITOR_INTERVAL", defaults.SlotMonitorInterval, time.Second, time.Hour); err != nil {
		return err
	}
	if cfg.VerifyScheduleInterval, err = boundedDurationVar(getenv, "SERVICE_VERIFY_SCHEDULE_INTERVAL", defaults.VerifyScheduleInterval, time.Second, time.Hour); err != nil {
		return err
	}
	if cfg.CutoverChecksumMaxBytes, err = intVar(getenv, "SERVICE_CUTOVER_CHECKSUM_MAX_BYTES", defaults.CutoverChecksumMaxBytes, 1, 1<<50); err != nil {
		return err
	}
	if cfg.SequenceSyncInterval, err = boundedDurationVar(getenv, "SERVICE_SEQUENCE_SYNC_INTERVAL", defaults.SequenceSyncInterval, time.Second, time.Hour); err != nil {
		return err
	}
	if cfg.TokenTTL, err = tokenTTLVar(getenv, "SERVICE_TOKEN_TTL"); err != nil {
		return err
	}
	if cfg.RevokeTokensOnPasswordChange, err = boolVar(getenv, "SERVICE_REVOKE_TOKENS_ON_PASSWORD_CHANGE"); err != nil {
		return err
	}
	if cfg.LoginUserFailures, err = intVar(getenv, "SERVICE_LOGIN_MAX_FAILURES", defaults.LoginMaxFailures, 1, 1000); err != nil {
		return err
	}
	if cfg.LoginAddressFailures, err = intVar(getenv, "SERVICE_LOGIN_MAX_FAILURES_PER_ADDRESS", defaults.LoginMaxFailuresPerAddr, 1, 100000); err != nil {
		return err
	}
	if cfg.LoginFailureWindow, err = boundedDurationVar(getenv, "SERVICE_LOGIN_FAILURE_WINDOW", defaults.LoginFailureWindow, time.Second, 24*time.Hour); err != nil {
		return err
	}
	return nil
}

// logLevelVar reads a log level: debug, info (the default), warn or error.
func logLevelVar(getenv func(string) string, name string) (slog.Level, error) {
	switch strings.ToLower(cmp.Or(getenv(name), "info")) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return slog.LevelInfo, fmt.Errorf("%s=%q: use debug, info, warn or error", name, getenv(name))
}

// check refuses settings that contradict each other or are too weak.
func (cfg config) check() error {
	if cfg.LogFormat != "text" && cfg.LogFormat != "json" {
		return fmt.Errorf("SERVICE_LOG_FORMAT=%q: use text or json", cfg.LogFormat)
	}
	if cfg.CPUScheduling != cpuSchedulingBatch && cfg.CPUScheduling != cpuSchedulingNormal {
		return fmt.Errorf("SERVICE_CPU_SCHEDULING=%q: use %s or %s", cfg.CPUScheduling, cpuSchedulingBatch, cpuSchedulingNormal)
	}
	if cfg.JWTSecret != "" && len(cfg.JWTSecret) < 32 {
		return fmt.Errorf("SERVICE_JWT_SECRET is too short: use at least 32 characters, or leave it unset to have one generated and stored in the catalog")
	}
	if cfg.EncryptionKey != "" && cfg.EncryptionKeyFile != "" {
		return fmt.Errorf("SERVICE_ENCRYPTION_KEY and SERVICE_ENCRYPTION_KEY_FILE are both set: use one of them")
	}
	return nil
}

func intVar(getenv func(string) string, name string, def, lo, hi int) (int, error) {
	s := getenv(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%s=%q: want a whole number from %d to %d", name, s, lo, hi)
	}
	return n, nil
}

// boolVar reads true or false (in any letter case); unset is false.
// Anything else is an error, so that a typo never silently means false.
func boolVar(getenv func(string) string, name string) (bool, error) {
	switch s := getenv(name); strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return false, nil
	case "true":
		return true, nil
	case "false":
		return false, nil
	default:
		return false, fmt.Errorf("%s=%q: use true or false", name, s)
	}
}

// tokenTTLVar reads the token lifetime: unset or zero (0, 0s, 0h, 0d) means
// tokens do not expire; otherwise a duration from 1m to 30d.
func tokenTTLVar(getenv func(string) string, name string) (time.Duration, error) {
	s := strings.TrimSpace(getenv(name))
	if s == "" {
		return 0, nil
	}
	if n, err := strconv.Atoi(strings.TrimSuffix(s, "d")); err == nil && n == 0 {
		return 0, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d == 0 {
		return 0, nil
	}
	d, err := boundedDurationVar(getenv, name, 0, time.Minute, 30*24*time.Hour)
	if err != nil {
		return 0, fmt.Errorf("%w (or 0 for tokens that do not expire)", err)
	}
	return d, nil
}

// prefixesVar reads a comma-separated list of IP networks (10.0.0.0/8) or
// single addresses (10.1.2.3).
func prefixesVar(getenv func(string) string, name string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, item := range strings.Split(getenv(name), ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if p, err := netip.ParsePrefix(item); err == nil {
			out = append(out, p.Masked())
			continue
		}
		addr, err := netip.ParseAddr(item)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is neither an IP address nor a network such as 10.0.0.0/8", name, item)
		}
		out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
	}
	return out, nil
}

// boundedDurationVar is durationVar with bounds lo..hi (inclusive).
func boundedDurationVar(getenv func(string) string, name string, def, lo, hi time.Duration) (time.Duration, error) {
	d, err := durationVar(getenv, name, def)
	if err != nil {
		return 0, err
	}
	if d < lo || d > hi {
		return 0, fmt.Errorf("%s=%q: want a duration from %s to %s", name, getenv(name), formatDuration(lo), formatDuration(hi))
	}
	return d, nil
}

// formatDuration writes a duration the way the variables are written: 30d,
// 12h, 15m, 30s.
func formatDuration(d time.Duration) string {
	for _, u := range []struct {
		unit   time.Duration
		suffix string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d >= u.unit && d%u.unit == 0 {
			return strconv.FormatInt(int64(d/u.unit), 10) + u.suffix
		}
	}
	return d.String()
}

func durationVar(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	s := getenv(name)
	if s == "" {
		return def, nil
	}
	if strings.HasSuffix(s, "d") {
		if n, err := strconv.Atoi(strings.TrimSuffix(s, "d")); err == nil && n > 0 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as 30s, 12h or 7d", name, s)
	}
	return d, nil
}
