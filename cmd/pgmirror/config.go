package main

import (
	"cmp"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
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
	LogLevel         slog.Level
	LogFormat        string
	DataDir          string
	EmbeddedPort     int
	MirrorWorkers    int
	LogRetention     time.Duration
	ShutdownTimeout  time.Duration
	HTTP             httpConfig
}

func loadConfig(getenv func(string) string) (config, error) {
	cfg := config{
		DatabaseURL:   getenv("SERVICE_DATABASE_URL"),
		AdminUser:     cmp.Or(getenv("SERVICE_ADMIN_USER"), "admin"),
		AdminPassword: cmp.Or(getenv("SERVICE_ADMIN_PASSWORD"), "admin"),
		JWTSecret:     getenv("SERVICE_JWT_SECRET"),
		LogFormat:     cmp.Or(getenv("SERVICE_LOG_FORMAT"), "text"),
		DataDir:       cmp.Or(getenv("SERVICE_DATA_DIR"), ".pgmirror"),
	}
	cfg.adminPasswordSet = getenv("SERVICE_ADMIN_PASSWORD") != ""
	var err error
	if cfg.Port, err = intVar(getenv, "SERVICE_PORT", 8112, 1, 65535); err != nil {
		return cfg, err
	}
	if cfg.EmbeddedPort, err = intVar(getenv, "SERVICE_EMBEDDED_PG_PORT", 55432, 1, 65535); err != nil {
		return cfg, err
	}
	if cfg.MirrorWorkers, err = intVar(getenv, "SERVICE_MIRROR_WORKERS", 50, 1, 10000); err != nil {
		return cfg, err
	}
	if cfg.LogRetention, err = durationVar(getenv, "SERVICE_LOG_RETENTION", 7*24*time.Hour); err != nil {
		return cfg, err
	}
	if cfg.ShutdownTimeout, err = durationVar(getenv, "SERVICE_SHUTDOWN_TIMEOUT", 30*time.Second); err != nil {
		return cfg, err
	}
	if cfg.HTTP, err = loadHTTPConfig(getenv); err != nil {
		return cfg, err
	}
	switch strings.ToLower(cmp.Or(getenv("SERVICE_LOG_LEVEL"), "info")) {
	case "debug":
		cfg.LogLevel = slog.LevelDebug
	case "info":
		cfg.LogLevel = slog.LevelInfo
	case "warn", "warning":
		cfg.LogLevel = slog.LevelWarn
	case "error":
		cfg.LogLevel = slog.LevelError
	default:
		return cfg, fmt.Errorf("SERVICE_LOG_LEVEL=%q: use debug, info, warn or error", getenv("SERVICE_LOG_LEVEL"))
	}
	if cfg.LogFormat != "text" && cfg.LogFormat != "json" {
		return cfg, fmt.Errorf("SERVICE_LOG_FORMAT=%q: use text or json", cfg.LogFormat)
	}
	if cfg.JWTSecret != "" && len(cfg.JWTSecret) < 32 {
		return cfg, fmt.Errorf("SERVICE_JWT_SECRET is too short: use at least 32 characters, or leave it unset to have one generated and stored in the catalog")
	}
	return cfg, nil
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
