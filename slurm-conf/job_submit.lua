-- job_submit.lua for slurmctld (JobSubmitPlugins=lua in slurm.conf; the file sits next
-- to slurm.conf): refuse a job that asks for a colloc mode but for no GPU, when it is
-- submitted, with a message for the user. Merge colloc_check() into the
-- slurm_job_submit() of an existing job_submit.lua.
--
-- Why here: sbatch, srun and salloc do not show a SPANK plugin the job's GRES request,
-- so only the controller can tell. Without this file such a job is queued, starts, and
-- fails at once with "--colloc=MODE needs GPUs" on its stderr (the node is not touched).
-- The plugstack argument default=MODE is not seen here: only an explicit --colloc.

-- How the plugin's option reaches the controller (spank_job_env).
local COLLOC_OPTION = "_SLURM_SPANK_OPTION_colloc_colloc="

-- The --colloc value of the job, or nil.
local function colloc_mode(job_desc)
   local env = job_desc.spank_job_env
   if env == nil then
      return nil
   end
   for _, v in pairs(env) do
      if type(v) == "string" and v:sub(1, #COLLOC_OPTION) == COLLOC_OPTION then
         return v:sub(#COLLOC_OPTION + 1)
      end
   end
   return nil
end

-- Does the job ask for at least one GPU (--gres=gpu[:type]:N, --gpus, --gpus-per-node,
-- --gpus-per-socket, --gpus-per-task)? Slurm 22.05 writes "gres:gpu:2" and
-- "gres:gpu:a100:2", later releases "gres/gpu:2".
local function asks_for_gpus(job_desc)
   for _, field in ipairs({ "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task" }) do
      local value = job_desc[field]
      if value ~= nil then
         for item in string.gmatch(value, "[^,]+") do
            local count = item:match("^gres[:/]gpu:(%d+)$")
               or item:match("^gres[:/]gpu:[^:]+:(%d+)$")
            if item:match("^gres[:/]gpu$") then
               count = "1"
            end
            if count ~= nil and tonumber(count) > 0 then
               return true
            end
         end
      end
   end
   return false
end

function colloc_check(job_desc)
   local mode = colloc_mode(job_desc)
   if mode == nil or mode == "off" or asks_for_gpus(job_desc) then
      return slurm.SUCCESS
   end
   slurm.log_user("--colloc=%s needs GPUs: ask for them with --gres=gpu:N (or --gpus=N)", mode)
   return slurm.ERROR
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   return colloc_check(job_desc)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end

return slurm.SUCCESS
