local helpers = {}

function helpers.double(x)
  return x * 2
end

return helpers
