-- Argo CD health check for serving.dflash.dev/DFlashDeployment, following the kstatus conventions the operator
-- writes: nothing is judged until status.observedGeneration has caught up with metadata.generation.
hs = {}
local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report status"
  return hs
end
if status.observedGeneration == nil or status.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(obj.metadata.generation)
  return hs
end
local found = {}
for _, condition in ipairs(status.conditions) do
  found[condition.type] = condition
end
local function describe(condition)
  return (condition.reason or "") .. ": " .. (condition.message or "")
end
if found["Stalled"] ~= nil and found["Stalled"].status == "True" then
  hs.status = "Degraded"
  hs.message = describe(found["Stalled"])
  return hs
end
if found["SpeculationHealthy"] ~= nil and found["SpeculationHealthy"].status == "False" then
  hs.status = "Degraded"
  hs.message = describe(found["SpeculationHealthy"])
  return hs
end
if found["Ready"] ~= nil and found["Ready"].status == "True" then
  hs.status = "Healthy"
  hs.message = describe(found["Ready"])
  return hs
end
hs.status = "Progressing"
if found["Ready"] ~= nil then
  hs.message = describe(found["Ready"])
else
  hs.message = "Waiting for the Ready condition"
end
return hs
