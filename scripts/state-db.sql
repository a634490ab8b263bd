-- vllm-fleet: the PostgreSQL database and role that hold the shared stacks' Pulumi state, least privilege.
-- Run once as a PostgreSQL administrator (docs/state-backend.md):
--   psql "host=DBHOST user=postgres sslmode=verify-full" -v role=vllm_fleet_state -v db=vllm_fleet_state \
--     -f scripts/state-db.sql
-- then give the role its password with `\password vllm_fleet_state` in psql (it prompts; never on a command line).
-- The role logs in, and reads and writes the one state table: no superuser, no CREATE anywhere, no other
-- database. The table is the one the engine would create itself (pulumi v3.274.1,
-- pkg/backend/diy/postgres/schema.sql); made here, the role needs no CREATE privilege.
\set ON_ERROR_STOP on
CREATE ROLE :"role" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
CREATE DATABASE :"db";
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
GRANT CONNECT ON DATABASE :"db" TO :"role";
\connect :"db"
REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO :"role";
CREATE TABLE pulumi_state (
    key TEXT PRIMARY KEY,
    data JSON NOT NULL,
    updated_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now()
);
CREATE INDEX pulumi_state_key_prefix_idx ON pulumi_state (key text_pattern_ops);
GRANT SELECT, INSERT, UPDATE, DELETE ON pulumi_state TO :"role";
