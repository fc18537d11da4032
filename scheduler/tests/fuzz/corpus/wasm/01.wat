(module (func (export "_start")))
