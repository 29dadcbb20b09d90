// hostile: exit=0
// An unregistered dialect type parses as an opaque type: valid input for tidal-opt.
func.func @f(%x: !tidal.token) -> !tidal.token {
  return %x : !tidal.token
}
