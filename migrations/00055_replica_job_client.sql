-- +goose Up
-- The River client id of each replica: River records it in
-- river_job.attempted_by when the replica fetches a job, so that once the
-- replica is known dead (its lock connection gone) the jobs it left
-- running are rescued at once instead of after River's rescue delay.
ALTER TABLE replicas ADD COLUMN job_client_id text;
COMMENT ON COLUMN replicas.job_client_id IS 'River client id of the replica (the last entry of river_job.attempted_by of the jobs it works); its running jobs are rescued when it dies.';

-- +goose Down
ALTER TABLE replicas DROP COLUMN job_client_id;
