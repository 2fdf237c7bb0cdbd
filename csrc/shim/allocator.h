#pragma once
#include <c10/core/CachingDeviceAllocator.h>

namespace torch_neuronx {
c10::DeviceAllocator* allocator();
}
